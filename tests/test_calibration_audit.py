"""Assumption-6 audit: no alarm on a monotone stationary world model or pure noise; clear warnings on
non-monotone bias, drift and missing coverage."""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
import pytest

from wmrl.calibration.audit import AuditThresholds, audit_pool
from wmrl.calibration.calibrator import Calibrator
from wmrl.calibration.pool import AnchorPair
from wmrl.config import AlgorithmConfig

Phi = Callable[[np.ndarray], np.ndarray]


def synthetic(
    phi: Phi, n: int = 3000, noise: float = 0.1, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    r = rng.beta(2, 2, n)
    return np.clip(phi(r) + rng.normal(0, noise, n), 0, 1), r


MONOTONE: dict[str, Phi] = {
    "affine": lambda r: 0.2 + 0.6 * r,
    "square": lambda r: r**2,
    "optimistic": lambda r: np.sqrt(r),
    "step": lambda r: (r > 0.5) * 0.6 + 0.2,
}
NON_MONOTONE: dict[str, Phi] = {
    "tent": lambda r: 1 - np.abs(2 * r - 1),
    "sine": lambda r: 0.5 + 0.4 * np.sin(2 * np.pi * r),
    "inverted": lambda r: 1 - r,
}


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", list(MONOTONE))
def test_monotone_stationary_bias_does_not_warn(name: str, seed: int) -> None:
    report = audit_pool(*synthetic(MONOTONE[name], seed=seed))
    assert report.ok, report.warnings
    assert report.monotonicity_gain < 0.05


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_pure_noise_world_model_does_not_warn(seed: int) -> None:
    rng = np.random.default_rng(seed)
    report = audit_pool(rng.random(3000), rng.random(3000))
    assert report.ok, report.warnings


@pytest.mark.parametrize("name", list(NON_MONOTONE))
def test_non_monotone_bias_warns(name: str) -> None:
    report = audit_pool(*synthetic(NON_MONOTONE[name]))
    assert not report.ok
    assert report.monotonicity_gain > 0.3 and report.monotonicity_z > 3
    assert any("non-monotone" in w and "cannot be trusted" in w for w in report.warnings)


def test_drifting_bias_warns_about_stationarity() -> None:
    old = synthetic(MONOTONE["square"], n=3000, seed=0)
    new = synthetic(MONOTONE["optimistic"], n=1000, seed=1)
    report = audit_pool(np.concatenate([old[0], new[0]]), np.concatenate([old[1], new[1]]))
    assert report.stationarity_window == 1000
    assert report.stationarity_gap > 0.15
    assert any("drifts" in w for w in report.warnings)
    assert not any("non-monotone" in w for w in report.warnings)


def test_improving_policy_under_a_fixed_bias_is_not_drift() -> None:
    rng = np.random.default_rng(0)
    r = np.concatenate([rng.beta(2, 5, 3000), rng.beta(5, 2, 1000)])  # the policy got better
    pred = np.clip(r**2 + rng.normal(0, 0.1, 4000), 0, 1)
    report = audit_pool(pred, r)
    assert report.ok, report.warnings
    assert report.map_lag_gap > 0.15  # ... but the pool-wide f_hat lags it, and the report says so


def test_policy_that_left_the_old_range_skips_the_drift_check() -> None:
    rng = np.random.default_rng(0)
    r = np.concatenate([rng.uniform(0, 0.5, 3000), rng.uniform(0.5, 1, 1000)])
    report = audit_pool(np.clip(r**2 + rng.normal(0, 0.1, 4000), 0, 1), r)
    assert np.isnan(report.stationarity_gap)
    assert any("moved too far" in s for s in report.skipped)


def test_stationary_bias_has_no_stationarity_gap() -> None:
    report = audit_pool(*synthetic(MONOTONE["square"], n=4000))
    assert report.stationarity_gap < 0.05


def test_uncovered_high_scores_warn() -> None:
    pred, true = synthetic(MONOTONE["affine"], noise=0.05)  # r_hat stays below ~0.9
    chased = np.full(200, 0.97)  # the policy now gets world-model scores no anchor has seen
    report = audit_pool(pred, true, chased=chased)
    assert report.n_support_high < 10
    assert any("do not cover" in w for w in report.warnings)


def test_covered_high_scores_report_support_and_high_fraction() -> None:
    pred, true = synthetic(MONOTONE["affine"])
    report = audit_pool(pred, true, chased=pred[-500:])
    assert report.n_support_high >= 0.09 * len(pred)
    assert report.high_true_frac == pytest.approx(
        np.mean(true[-report.stationarity_window :] >= 0.7)
    )


def test_too_few_pairs_skip_every_check() -> None:
    report = audit_pool(*synthetic(NON_MONOTONE["tent"], n=150))
    assert report.ok and np.isnan(report.monotonicity_gain)
    assert "only 150 anchor pairs" in report.skipped[0]


def test_audit_rejects_bad_scores() -> None:
    with pytest.raises(ValueError, match="audit predicted"):
        audit_pool(np.array([0.5, 2.0] * 200), np.full(400, 0.5))


def test_thresholds_are_reported() -> None:
    t = AuditThresholds(max_monotonicity_gain=0.2)
    assert (
        audit_pool(*synthetic(MONOTONE["affine"]), thresholds=t).thresholds.max_monotonicity_gain
        == 0.2
    )


def test_calibrator_audit_logs_its_warnings(caplog: pytest.LogCaptureFixture) -> None:
    pred, true = synthetic(NON_MONOTONE["tent"], n=512)
    cal = Calibrator(AlgorithmConfig())
    for s in range(0, 512, 64):
        cal.observe(
            [
                AnchorPair(
                    f"p{i}",
                    s // 64,
                    "task",
                    f"g{i // 8}",
                    f"t{i % 8}",
                    float(pred[i]),
                    float(true[i]),
                )
                for i in range(s, s + 64)
            ],
            s // 64,
        )
    with caplog.at_level(logging.WARNING, logger="wmrl.calibration.calibrator"):
        report = cal.audit()
    assert not report.ok
    assert "non-monotone" in caplog.text
