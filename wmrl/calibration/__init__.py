"""Calibration of world-model rewards from anchor pairs (paper §3.3): pool, debiasing, denoising, audit."""

from wmrl.calibration.audit import AuditReport, AuditThresholds, audit_pool
from wmrl.calibration.calibrator import Calibrator
from wmrl.calibration.debias import Debiaser
from wmrl.calibration.denoise import Denoiser
from wmrl.calibration.pool import AnchorPair, AnchorPool

__all__ = [
    "AnchorPair",
    "AnchorPool",
    "AuditReport",
    "AuditThresholds",
    "Calibrator",
    "Debiaser",
    "Denoiser",
    "audit_pool",
]
