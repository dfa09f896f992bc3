"""Inverse-Variance Denoising (paper §3.3, Eq. 5 implementation form; Appendix D).

eta2     = mean over the recent window of (f(r_hat) - r)^2, divided by the mean within-group
           variance of the true scores in the same window (Appendix D: the normalisation turns a
           reward-level statistic into an estimate of the gradient-level variance ratio). The
           calibrated score f(r_hat) of each pair is *prequential* (out of sample): the map that
           existed before the pair arrived (the Calibrator keeps these; see docs/calibration.md);
eta2_cal = eta2 at the end of warm-up (the first fit), fixed for the rest of the run (c = 1/eta2_cal),
           with its mean squared residual floored at ``RESOLUTION**2`` (score units);
rho      = clip(1 + eta2 / eta2_cal, 1, w_max)                (the anchor-group weight of Eq. 5).

Degenerate cases (documented in docs/calibration.md):
- before warm-up: rho = 1, eta2 and eta2_cal unset;
- a step without new anchor pairs: nothing is recomputed, rho stays as it was;
- no within-group spread in the window (every group constant, or no group with two pairs in the
  window): the normaliser falls back to the variance of all true scores in the window; if that is
  zero too, the window says nothing about the score spread and eta2/rho are left unchanged (and
  eta2_cal, if not yet set, is set at the next informative window);
- a (near) noise-free world model: the residual at warm-up is float rounding or interpolation error.
  The calibration residual is floored in score units (RMS ``RESOLUTION``, below one step of a
  60-entry leaderboard), not as a ratio, so rho stays ~1 while the world model stays that good and
  rho = 2 once its RMS error reaches ``RESOLUTION``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from wmrl.calibration.stats import within_group_variance

# Score units: a world model whose calibrated scores are off by less than this (RMS) is treated as
# exact when eta2_cal is recorded. 0.01 is below one position on a 60-entry leaderboard (1/60).
RESOLUTION = 0.01
# Score units squared: a spread at or below this is float rounding, not a spread (equal scores give
# 1e-32 where their mean is not exact, e.g. three 0.7s; normalising by it put eta2 at 1e30).
FLOAT_SPREAD = 1e-12


def spread_normaliser(true: np.ndarray, group_ids: Sequence[str]) -> float:
    """The within-group variance, or the window's overall variance when that is zero/undefined; 0 if none."""
    v = within_group_variance(true, group_ids)
    if not (v > FLOAT_SPREAD):
        v = float(np.var(true)) if len(true) else 0.0
    return v if v > FLOAT_SPREAD else 0.0


def normalised_residual(
    calibrated: np.ndarray, true: np.ndarray, group_ids: Sequence[str], *, min_mse: float = 0.0
) -> float | None:
    """eta2 of one window (its MSE floored at ``min_mse``, score units squared); None when the window
    has no spread of true scores to normalise by."""
    norm = spread_normaliser(true, group_ids)
    if not (norm > 0.0):
        return None
    mse = float(np.mean((np.asarray(calibrated) - np.asarray(true)) ** 2))
    return max(mse, min_mse) / norm


def rho_from(eta2: float, eta2_cal: float, w_max: float) -> float:
    """rho = clip(1 + eta2 / eta2_cal, 1, w_max) (Eq. 5 weight); eta2_cal > 0 by construction."""
    if not eta2_cal > 0.0:
        raise ValueError(f"eta2_cal={eta2_cal!r} must be > 0 (it is floored in score units when recorded)")
    return float(min(max(1.0 + eta2 / eta2_cal, 1.0), w_max))


@dataclass
class Denoiser:
    w_max: float = 4.0
    eta2: float | None = None  # latest window value
    eta2_cal: float | None = None  # fixed once at the end of warm-up
    rho: float = 1.0
    n_updates: int = 0

    def update(
        self, calibrated: np.ndarray, true: np.ndarray, group_ids: Sequence[str], warmed_up: bool
    ) -> None:
        """Recompute eta2 and rho from one recent window of out-of-sample calibrated scores; call only
        when new pairs arrived."""
        if not warmed_up:
            return  # rho = 1 until the end of warm-up
        eta2 = normalised_residual(calibrated, true, group_ids)
        if eta2 is None:
            return  # no score spread in the window: keep the previous eta2 and rho
        self.eta2 = eta2
        if self.eta2_cal is None:  # recorded once; floored in score units (see RESOLUTION)
            self.eta2_cal = normalised_residual(calibrated, true, group_ids, min_mse=RESOLUTION**2)
        self.rho = rho_from(eta2, self.eta2_cal, self.w_max)
        self.n_updates += 1

    def to_state(self) -> dict[str, Any]:
        return {
            "eta2": self.eta2,
            "eta2_cal": self.eta2_cal,
            "rho": self.rho,
            "n_updates": self.n_updates,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any], *, w_max: float) -> Denoiser:
        return cls(
            w_max=w_max,
            eta2=state["eta2"],
            eta2_cal=state["eta2_cal"],
            rho=float(state["rho"]),
            n_updates=int(state["n_updates"]),
        )
