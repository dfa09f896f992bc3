"""Online Debiasing (paper §3.3, Eq. 4): f_hat = isotonic regression of r on r_hat over the pool.

The fit is the map of scikit-learn's ``IsotonicRegression(increasing=True, y_min=0, y_max=1,
out_of_bounds="clip")`` (computed with scipy's PAVA, see ``fit_isotonic``). It is applied as ``np.interp``
on its knots: the same piecewise-linear, end-clipped function sklearn's ``predict`` computes, but from two
arrays that we persist exactly, so a restored debiaser maps every input bit-identically after a restart.

Schedule (Appendix D): identity until ``min_pairs`` pairs; first fit when the pool reaches it; refit
once ``refit_every`` new pairs have arrived since the last fit.
"""

from __future__ import annotations

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
    """Piecewise-linear interpolation between knots, constant (clipped) outside them."""
    return np.clip(np.interp(r_hat, x_knots, y_knots), 0.0, 1.0)


def group_folds(groups: Sequence[str], folds: int) -> list[np.ndarray]:
    """Test-index arrays of up to ``folds`` folds that never split a group: groups, in order of first
    appearance, are dealt round-robin to the folds (deterministic; every fold spans the whole run).
    Pairs of one GRPO group share the world model's error on that task, so a fold that split a group
    would score part of it with a map fit on the rest of it."""
    labels = np.asarray(groups, dtype=object)
    _, first, codes = np.unique(labels, return_index=True, return_inverse=True)
    order = np.argsort(np.argsort(first))  # group code -> rank of its first appearance
    k = min(int(folds), len(first))
    if k < 2:
        raise ValueError(f"cross-fitting needs pairs from at least 2 groups, got {k}")
    fold = order[codes] % k
    return [np.flatnonzero(fold == i) for i in range(k)]


def cross_fitted(
    x: np.ndarray, y: np.ndarray, groups: Sequence[str], folds: int = 5
) -> np.ndarray:
    """Out-of-fold isotonic predictions of y from x: each group is predicted by a map fit without it."""
    out = np.empty(len(x), dtype=np.float64)
    for test in group_folds(groups, folds):
        train = np.ones(len(x), dtype=bool)
        train[test] = False
        out[test] = apply_map(*fit_isotonic(x[train], y[train]), x[test])
    return out


@dataclass
class Debiaser:
    min_pairs: int = 200
    refit_every: int = 64
    x_knots: np.ndarray | None = None  # None: identity (not yet warmed up)
    y_knots: np.ndarray | None = None
    n_at_fit: int = 0  # pool size at the last fit
    n_refits: int = 0

    @property
    def fitted(self) -> bool:
        return self.x_knots is not None

    def due(self, n_pairs: int) -> bool:
        if not self.fitted:
            return n_pairs >= self.min_pairs
        return n_pairs - self.n_at_fit >= self.refit_every

    def update(self, predicted: np.ndarray, true: np.ndarray) -> bool:
        """Refit on the whole pool if the schedule says so; returns whether it did."""
        n = len(predicted)
        if not self.due(n):
            return False
        self.x_knots, self.y_knots = fit_isotonic(predicted, true)
        self.n_at_fit = n
        self.n_refits += 1
        return True

    def __call__(self, r_hat: ArrayLike) -> np.ndarray:
        x = as_scores("r_hat", r_hat)
        if not self.fitted:
            return x.copy()
        assert self.y_knots is not None
        return apply_map(self.x_knots, self.y_knots, x)

    # ------------------------------------------------------------------ persistence
    def to_state(self) -> dict[str, Any]:
        return {
            "min_pairs": self.min_pairs,
            "refit_every": self.refit_every,
            "x_knots": None if self.x_knots is None else self.x_knots.tolist(),
            "y_knots": None if self.y_knots is None else self.y_knots.tolist(),
            "n_at_fit": self.n_at_fit,
            "n_refits": self.n_refits,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any], *, min_pairs: int, refit_every: int) -> Debiaser:
        """Rebuild from :meth:`to_state`; the schedule comes from the (possibly changed) config."""

        def arr(v: list[float] | None) -> np.ndarray | None:
            return None if v is None else np.asarray(v, dtype=np.float64)

        return cls(
            min_pairs=min_pairs,
            refit_every=refit_every,
            x_knots=arr(state["x_knots"]),
            y_knots=arr(state["y_knots"]),
            n_at_fit=int(state["n_at_fit"]),
            n_refits=int(state["n_refits"]),
        )
