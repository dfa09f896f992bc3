"""Online Debiasing (paper §3.3, Eq. 4): f_hat = isotonic regression of r on r_hat over the pool.

The fit is the map of scikit-learn's ``IsotonicRegression(increasing=True, y_min=0, y_max=1)``
(computed with scipy's PAVA, see ``fit_isotonic``), applied as ``np.interp`` on its knots: the same
piecewise-linear function sklearn's ``predict`` computes between the end knots, from arrays that we
persist exactly, so a restored debiaser maps every input bit-identically after a restart.

Beyond the end knots (an r_hat lower or higher than any anchor pair's) sklearn's ``out_of_bounds="clip"``
holds the map constant. The debiaser instead continues it linearly from the end knot with the
least-squares slope of r on r_hat over the pool's end region (``end_slopes``: the lowest / highest
``END_SHARE`` of the pairs by r_hat), never negative, clipped to [0, 1] (``MonotoneMap``). Why: a policy
that improves writes solutions the world model rates above every anchor so far; clipping scores them all
as the best anchor, which is wrong by the extrapolation error (on a noise-free affine world model, the
whole calibration error) and ties the best solutions of a group. See docs/calibration.md.

Schedule (Appendix D): identity until ``min_pairs`` pairs; first fit when the pool reaches it; refit
once ``refit_every`` new pairs have arrived since the last fit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy.optimize import isotonic_regression


def as_scores(name: str, values: ArrayLike) -> np.ndarray:
    """A float64 array of scores in [0, 1]; NaN or out-of-range values raise, naming the first offender."""
    x = np.asarray(values, dtype=np.float64)
    bad = ~((x >= 0.0) & (x <= 1.0))  # NaN fails both comparisons
    if bad.any():
        i = np.flatnonzero(bad.ravel())[0]
        raise ValueError(
            f"{name}: {int(bad.sum())} value(s) outside [0, 1] or NaN, first at index {i}: {float(x.ravel()[i])!r}"
        )
    return x


def fit_isotonic(predicted: np.ndarray, true: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eq. 4: argmin over non-decreasing f of sum (f(r_hat_j) - r_j)^2; returns the map's knots.

    The same knots as sklearn's ``IsotonicRegression(increasing=True, y_min=0, y_max=1)`` (ties in
    r_hat averaged, pool-adjacent-violators, clipped, inner points of flat runs dropped; tested equal),
    computed with scipy's PAVA without sklearn's per-call validation: ~15x faster, which the audit's
    group-wise cross-fitting (about 20 fits per audit) needs.
    """
    x, inverse = np.unique(np.asarray(predicted, dtype=np.float64), return_inverse=True)
    weight = np.bincount(inverse).astype(np.float64)
    y = np.bincount(inverse, weights=np.asarray(true, dtype=np.float64)) / weight
    y = np.clip(isotonic_regression(y, weights=weight, increasing=True).x, 0.0, 1.0)
    keep = np.ones(len(y), dtype=bool)  # a flat run is described by its two end knots
    keep[1:-1] = (y[:-2] != y[1:-1]) | (y[1:-1] != y[2:])
    return x[keep], y[keep]


def apply_map(x_knots: np.ndarray, y_knots: np.ndarray, r_hat: np.ndarray) -> np.ndarray:
    """Piecewise-linear interpolation between knots, constant (clipped) outside them (sklearn's map; the
    audit's fits of phi use it)."""
    return np.clip(np.interp(r_hat, x_knots, y_knots), 0.0, 1.0)


# The end region whose slope continues the map beyond its end knots: this share of the pairs (at least
# END_MIN_PAIRS) with the lowest / highest r_hat. 10 % of a 200-pair warm-up pool is 20 pairs.
END_SHARE = 0.1
END_MIN_PAIRS = 8
# An end region narrower than this (score units) has no slope to speak of (ties, clipped r_hat): the map
# stays constant beyond that end, as sklearn's clip does. Same resolution as the denoiser's floor.
END_MIN_SPAN = 0.01


def _slope(x: np.ndarray, y: np.ndarray) -> float:
    """Least-squares slope of y on x, floored at 0 (monotone map); 0 when x spans < END_MIN_SPAN."""
    if len(x) < 2 or float(x.max() - x.min()) < END_MIN_SPAN:
        return 0.0
    dx = x - x.mean()
    return max(float(dx @ (y - y.mean()) / (dx @ dx)), 0.0)


def end_slopes(predicted: np.ndarray, true: np.ndarray) -> tuple[float, float]:
    """Slopes (low end, high end) of r on r_hat over the END_SHARE of pairs with the lowest and the
    highest r_hat: how the map continues beyond its first and last knot."""
    x, y = np.asarray(predicted, dtype=np.float64), np.asarray(true, dtype=np.float64)
    k = min(len(x), max(END_MIN_PAIRS, math.ceil(END_SHARE * len(x))))
    order = np.argsort(x, kind="stable")
    low, high = order[:k], order[len(x) - k :]
    return _slope(x[low], y[low]), _slope(x[high], y[high])


@dataclass(frozen=True)
class MonotoneMap:
    """f_hat: the isotonic knots, continued linearly beyond the end knots, clipped to [0, 1]."""

    x: np.ndarray
    y: np.ndarray
    low_slope: float = 0.0
    high_slope: float = 0.0

    @classmethod
    def fit(cls, predicted: np.ndarray, true: np.ndarray) -> MonotoneMap:
        x, y = fit_isotonic(predicted, true)
        return cls(x, y, *end_slopes(predicted, true))

    def __call__(self, r_hat: np.ndarray) -> np.ndarray:
        r_hat = np.asarray(r_hat, dtype=np.float64)
        out = np.interp(r_hat, self.x, self.y)
        # beyond the ends: the end knot's value plus the end region's slope times the distance
        out = np.where(r_hat < self.x[0], self.y[0] - self.low_slope * (self.x[0] - r_hat), out)
        out = np.where(r_hat > self.x[-1], self.y[-1] + self.high_slope * (r_hat - self.x[-1]), out)
        return np.clip(out, 0.0, 1.0)


def group_folds(groups: Sequence[str], folds: int) -> list[np.ndarray]:
    """Test-index arrays of up to ``folds`` folds that never split a group: groups, in order of first
    appearance, are dealt round-robin to the folds (deterministic; every fold spans the whole run).
    Pairs of one GRPO group share the world model's error on that task, so a fold that split a group
    would score part of it with a map fit on the rest of it."""
    labels = np.asarray(groups)  # unicode, not object: same order, faster sort
    _, first, codes = np.unique(labels, return_index=True, return_inverse=True)
    order = np.argsort(np.argsort(first))  # group code -> rank of its first appearance
    k = min(int(folds), len(first))
    if k < 2:
        raise ValueError(f"cross-fitting needs pairs from at least 2 groups, got {k}")
    fold = order[codes] % k
    return [np.flatnonzero(fold == i) for i in range(k)]


def cross_fitted(
    x: np.ndarray, y: np.ndarray, groups: Sequence[str], folds: int = 5, *, extrapolate: bool = False
) -> np.ndarray:
    """Out-of-fold isotonic predictions of y from x: each group is predicted by a map fit without it;
    ``extrapolate``: the debiaser's map (``MonotoneMap``), else sklearn's clipped one (the audit's)."""
    out = np.empty(len(x), dtype=np.float64)
    for test in group_folds(groups, folds):
        train = np.ones(len(x), dtype=bool)
        train[test] = False
        if extrapolate:
            out[test] = MonotoneMap.fit(x[train], y[train])(x[test])
        else:
            out[test] = apply_map(*fit_isotonic(x[train], y[train]), x[test])
    return out


@dataclass
class Debiaser:
    min_pairs: int = 200
    refit_every: int = 64
    fitted_map: MonotoneMap | None = None  # None: identity (not yet warmed up)
    n_at_fit: int = 0  # pool size at the last fit
    n_refits: int = 0

    @property
    def fitted(self) -> bool:
        return self.fitted_map is not None

    def due(self, n_pairs: int) -> bool:
        if not self.fitted:
            return n_pairs >= self.min_pairs
        return n_pairs - self.n_at_fit >= self.refit_every

    def update(self, predicted: np.ndarray, true: np.ndarray) -> bool:
        """Refit on the whole pool if the schedule says so; returns whether it did."""
        n = len(predicted)
        if not self.due(n):
            return False
        self.fitted_map = MonotoneMap.fit(predicted, true)
        self.n_at_fit = n
        self.n_refits += 1
        return True

    def __call__(self, r_hat: ArrayLike) -> np.ndarray:
        x = as_scores("r_hat", r_hat)
        if self.fitted_map is None:
            return x.copy()
        return self.fitted_map(x)

    # ------------------------------------------------------------------ persistence
    def to_state(self) -> dict[str, Any]:
        f = self.fitted_map
        return {
            "min_pairs": self.min_pairs,
            "refit_every": self.refit_every,
            "x_knots": None if f is None else f.x.tolist(),
            "y_knots": None if f is None else f.y.tolist(),
            "low_slope": None if f is None else f.low_slope,
            "high_slope": None if f is None else f.high_slope,
            "n_at_fit": self.n_at_fit,
            "n_refits": self.n_refits,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any], *, min_pairs: int, refit_every: int) -> Debiaser:
        """Rebuild from :meth:`to_state`; the schedule comes from the (possibly changed) config."""
        fitted = None
        if state["x_knots"] is not None:
            fitted = MonotoneMap(np.asarray(state["x_knots"], dtype=np.float64),
                                 np.asarray(state["y_knots"], dtype=np.float64),
                                 float(state["low_slope"]), float(state["high_slope"]))
        return cls(
            min_pairs=min_pairs,
            refit_every=refit_every,
            fitted_map=fitted,
            n_at_fit=int(state["n_at_fit"]),
            n_refits=int(state["n_refits"]),
        )
