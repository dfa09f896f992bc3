"""Assumption-6 audit (the paper assumes it, App. B.3, but never checks it).

Assumption 6: r_hat = phi(r) + xi with phi non-decreasing; a pool-wide fit (Eq. 4) further assumes
phi does not move during the run. From the anchor pool we measure, with K-fold cross-validation so
that noise alone cannot look like signal:

(a) monotonicity: held-out gain of a flexible non-monotone fit (binned means) over the isotonic fit
    of phi = E[r_hat | r], as a relative MSE reduction. We fit phi (r_hat on r), not f_hat: when phi
    folds (e.g. 1 - |2r - 1|), E[r | r_hat] averages the two branches and can look flat and monotone,
    so the calibration direction would hide exactly the failure we look for.
(b) stationarity: phi fit on the older pairs vs phi fit on the recent window, both scored on held-out
    recent pairs whose true score lies inside the older pairs' range (relative MSE gap). phi, unlike
    f_hat = E[r | r_hat], does not change when the policy merely moves (the distribution of r shifts),
    and the range restriction keeps a move into new scores from looking like drift.
    ``map_lag_gap`` is the same comparison for f_hat itself, on all recent pairs: how much better a
    map fit on recent pairs calibrates them than the older pairs' map. It is reported, not warned
    about: it grows whenever the policy improves (the pool-wide f_hat shrinks current scores toward
    older ones), which is expected, but a large value says the pool-wide map lags.
(c) coverage: how many anchor pairs support f_hat where GRPO pushes (the top quantile of the
    world-model scores being calibrated), and the fraction of recent anchors with a high true score.

A gain/gap warns only when it is both large (relative threshold) and significant (paired z-score of
the per-pair squared-error differences above ``min_z``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from wmrl.calibration.debias import apply_map, as_scores, fit_isotonic


@dataclass(frozen=True)
class AuditThresholds:
    min_pairs: int = 200  # fewer pairs: every check is skipped
    max_pairs: int = 20000  # audit the newest this-many pairs (keeps an audit well under a second)
    folds: int = 5
    min_z: float = 3.0  # a gain must be this many standard errors above zero to count
    max_monotonicity_gain: float = 0.10  # relative held-out MSE reduction of the flexible fit
    max_stationarity_gap: float = (
        0.15  # relative held-out MSE excess of the older phi on recent pairs
    )
    stationarity_window: int = 0  # recent pairs; 0: max(recent_window, n // 4)
    min_old_pairs: int = 100
    min_overlap: int = 50  # recent pairs inside the older pairs' range needed to judge drift
    overlap_quantile: float = 0.05  # "inside the range": between these quantiles of the older r
    n_bins: int = 20  # flexible fit: means over this many quantile bins of r
    high_quantile: float = 0.9  # "the high range GRPO chases": top 10% of the world-model scores
    high_score: float = 0.7  # a "high" true score
    min_support: int = 10  # anchor pairs needed under the high range
    seed: int = 0


@dataclass
class AuditReport:
    n_pairs: int
    monotonicity_gain: float  # (MSE_isotonic - MSE_flexible) / MSE_isotonic of phi, held out
    monotonicity_z: float
    stationarity_gap: float  # (MSE_old_phi - MSE_recent_phi) / MSE_recent_phi on recent pairs
    stationarity_z: float
    map_lag_gap: float  # the same for f_hat on all recent pairs (reported, never warned about)
    stationarity_window: int
    high_threshold: float  # r_hat at the high_quantile of the chased scores
    n_support_high: int  # pool pairs with r_hat >= high_threshold
    high_true_frac: float  # fraction of recent anchors with r >= high_score
    thresholds: AuditThresholds
    warnings: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # checks not run, with the reason

    @property
    def ok(self) -> bool:
        return not self.warnings

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ok"] = self.ok
        return d


def _folds(n: int, k: int, rng: np.random.Generator) -> list[np.ndarray]:
    return np.array_split(rng.permutation(n), k)


def _binned_means(
    x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, n_bins: int
) -> np.ndarray:
    """A flexible, non-monotone fit: the mean of y in each quantile bin of x (empty bins: global mean)."""
    edges = np.unique(np.quantile(x_train, np.linspace(0.0, 1.0, n_bins + 1))[1:-1])
    b_train, b_test = (
        np.searchsorted(edges, x_train, "right"),
        np.searchsorted(edges, x_test, "right"),
    )
    counts = np.bincount(b_train, minlength=len(edges) + 1)
    sums = np.bincount(b_train, weights=y_train, minlength=len(edges) + 1)
    means = np.where(counts > 0, sums / np.maximum(counts, 1), y_train.mean())
    return means[b_test]


def _isotonic(x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray) -> np.ndarray:
    return apply_map(*fit_isotonic(x_train, y_train), x_test)


def _paired(err_ref: np.ndarray, err_alt: np.ndarray) -> tuple[float, float]:
    """Relative MSE reduction of alt over ref and its paired z-score."""
    d = err_ref - err_alt
    ref = float(err_ref.mean())
    gain = float(d.mean()) / ref if ref > 0 else 0.0
    sd = float(d.std(ddof=1)) if len(d) > 1 else 0.0
    z = float(d.mean()) / (sd / math.sqrt(len(d))) if sd > 0 else 0.0
    return gain, z


def monotonicity(true: np.ndarray, pred: np.ndarray, t: AuditThresholds) -> tuple[float, float]:
    """(a): held-out gain of binned means over isotonic, both fitting phi = E[r_hat | r]."""
    err_iso, err_flex = np.empty(len(true)), np.empty(len(true))
    for test in _folds(len(true), t.folds, np.random.default_rng(t.seed)):
        train = np.ones(len(true), dtype=bool)
        train[test] = False
        err_iso[test] = (_isotonic(true[train], pred[train], true[test]) - pred[test]) ** 2
        err_flex[test] = (
            _binned_means(true[train], pred[train], true[test], t.n_bins) - pred[test]
        ) ** 2
    return _paired(err_iso, err_flex)


def old_vs_recent(
    x: np.ndarray, y: np.ndarray, window: int, t: AuditThresholds, *, overlap: bool
) -> tuple[float, float, int]:
    """(b): an isotonic map of y on x fit on the older pairs vs one fit on the recent window, scored
    on held-out recent pairs (only those with x inside the older pairs' range if ``overlap``).
    Returns (relative gap, z, number of scored pairs); NaNs when fewer than ``min_overlap`` scored."""
    old_x, old_y, rx, ry = x[:-window], y[:-window], x[-window:], y[-window:]
    old_map = fit_isotonic(old_x, old_y)
    scored = np.ones(window, dtype=bool)
    if overlap:
        lo, hi = np.quantile(old_x, [t.overlap_quantile, 1.0 - t.overlap_quantile])
        scored = (rx >= lo) & (rx <= hi)
    if scored.sum() < t.min_overlap:
        return float("nan"), float("nan"), int(scored.sum())
    err_old, err_new = np.empty(window), np.empty(window)
    for test in _folds(window, t.folds, np.random.default_rng(t.seed + 1)):
        train = np.ones(window, dtype=bool)
        train[test] = False
        err_old[test] = (apply_map(*old_map, rx[test]) - ry[test]) ** 2
        err_new[test] = (_isotonic(rx[train], ry[train], rx[test]) - ry[test]) ** 2
    gap, z = _paired(err_old[scored], err_new[scored])
    return gap, z, int(scored.sum())


def audit_pool(
    predicted: np.ndarray,
    true: np.ndarray,
    *,
    chased: np.ndarray | None = None,
    recent_window: int = 128,
    thresholds: AuditThresholds | None = None,
) -> AuditReport:
    """Audit Assumption 6 on pool arrays (insertion order). ``chased``: recent world-model scores that
    were calibrated (the range GRPO pushes into); without it, the pool's recent r_hat stand in."""
    t = thresholds or AuditThresholds()
    pred = as_scores("audit predicted", predicted)[-t.max_pairs :]
    true = as_scores("audit true", true)[-t.max_pairs :]
    if len(pred) != len(true):
        raise ValueError(f"audit: {len(pred)} predicted but {len(true)} true scores")
    n = len(pred)
    nan = float("nan")
    window = min(t.stationarity_window or max(recent_window, n // 4), n)
    report = AuditReport(n, nan, nan, nan, nan, nan, window, nan, 0, nan, t)
    if n < t.min_pairs:
        report.skipped.append(f"all checks: only {n} anchor pairs, the audit needs {t.min_pairs}")
        return report

    report.monotonicity_gain, report.monotonicity_z = monotonicity(true, pred, t)
    if report.monotonicity_gain > t.max_monotonicity_gain and report.monotonicity_z > t.min_z:
        report.warnings.append(
            "world-model bias looks non-monotone: a flexible fit of r_hat against the true score "
            f"beats the isotonic fit by {report.monotonicity_gain:.0%} held-out MSE "
            f"(z = {report.monotonicity_z:.1f}); Assumption 6 fails and the debiasing correction "
            "cannot be trusted"
        )

    if n - window < t.min_old_pairs or window < 2 * t.folds:
        report.skipped.append(
            f"stationarity: needs {t.min_old_pairs} pairs older than the recent {window}, has {n - window}"
        )
    else:
        gap, z, scored = old_vs_recent(true, pred, window, t, overlap=True)
        report.stationarity_gap, report.stationarity_z = gap, z
        report.map_lag_gap = old_vs_recent(pred, true, window, t, overlap=False)[0]
        if math.isnan(gap):
            report.skipped.append(
                f"stationarity: only {scored} of the last {window} anchors have a true score inside "
                f"the older anchors' range (need {t.min_overlap}); the policy moved too far to tell "
                "drift from the move"
            )
        elif gap > t.max_stationarity_gap and z > t.min_z:
            report.warnings.append(
                f"world-model bias drifts: on the last {window} anchor pairs, the world model's "
                f"distortion phi fit on them predicts r_hat {gap:.0%} better (held-out MSE, "
                f"z = {z:.1f}) than phi fit on older pairs; the pool-wide debiasing map mixes old and "
                "new bias"
            )

    chased_scores = (
        pred[-window:] if chased is None or len(chased) == 0 else as_scores("chased", chased)
    )
    report.high_threshold = float(np.quantile(chased_scores, t.high_quantile))
    report.n_support_high = int(np.count_nonzero(pred >= report.high_threshold))
    report.high_true_frac = float(np.mean(true[-window:] >= t.high_score))
    if report.n_support_high < t.min_support:
        report.warnings.append(
            f"anchors do not cover the high scores GRPO chases: the top {1 - t.high_quantile:.0%} of "
            f"world-model scores (r_hat >= {report.high_threshold:.2f}) rest on only "
            f"{report.n_support_high} anchor pairs (need {t.min_support}); the debiasing map there is "
            "an extrapolation"
        )
    return report
