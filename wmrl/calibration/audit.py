"""Assumption-6 audit (the paper assumes it, App. B.3, but never checks it).

Assumption 6: r_hat = phi(r) + xi with phi non-decreasing; a pool-wide fit (Eq. 4) further assumes phi
is one function for every task and does not move during the run. The anchor pairs of one GRPO group
share the world model's misreading of their task, so every fold and every standard error below is
clustered by group (and, where there are enough tasks, the more conservative of group and task
clustering is used). Effects are stated in score units and against the within-group spread of the
world-model scores, which is what GRPO's advantages are made of.

(a) monotonicity: held-out gain of a flexible non-monotone fit (binned means) over the isotonic fit of
    phi = E[r_hat | r], groups held out together. We fit phi, not f_hat: when phi folds (1 - |2r - 1|),
    E[r | r_hat] averages the two branches and can look flat and monotone.
(b) stationarity: phi fit on the older pairs vs phi fit on the recent window, both scored on held-out
    recent groups whose true score lies inside the older pairs' range. phi, unlike f_hat, does not
    change when the policy merely moves; ``map_lag_gap`` (reported, never warned about) is the same
    comparison for f_hat, which lags whenever the policy improves.
(c) per-task bias: a one-way random-effects ANOVA of the world model's residuals r_hat - phi(r) on
    task, group means as the units, phi fit with each task held out; the tasks furthest off are named,
    and the share of the calibrated residual variance f_hat(r_hat) - r explained by task is reported.
    One global f_hat cannot correct a bias that differs by task.
(d) coverage: anchor pairs (and groups) under the high range GRPO chases (the top quantile of the
    world-model scores being calibrated); the fraction of recent anchors with a high true score.
(e) flat_top, "the world model cannot rank at the top" (issue 37): the Spearman correlation of r and
    r_hat (cleared of the error its group shares) among the anchor pairs with a high true score (the top
    quartile of the scores that did not crash), with a group-clustered bootstrap;
    it flags when even the bootstrap upper bound is below
    ``min_top_rank``. phi flat or saturating at the top (Theorem 4's Delta_phi -> 0 there) or noise that
    swamps phi's rise: either way the world-model stream cannot tell the best solutions apart, only the
    anchor stream can (the response: ``algorithm.on_flat_world_model``). Not an Assumption-6 check: a
    monotone phi can be flat.

False alarms of a whole run: the audit runs at every refit (~50 times in a 400-step run), so a check
*flags* when its effect is large and significant, and *warns* only once it has flagged at ``persist``
consecutive audits (pass the previous ``streaks``; a one-off audit with ``streaks=None`` warns at the
first flag). The thresholds are calibrated by simulation: ``scripts/audit_error_rates.py``,
``results/calibration/audit_error_rates.md``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from wmrl.calibration.debias import apply_map, as_scores, cross_fitted, fit_isotonic, group_folds
from wmrl.calibration.stats import clustered_z, codes_of, task_effects, within_group_variance

CHECKS = ("monotonicity", "stationarity", "task_bias", "coverage", "flat_top")
NAN = float("nan")


@dataclass(frozen=True)
class AuditThresholds:
    min_pairs: int = 200  # fewer pairs: every check is skipped
    min_groups: int = 16  # fewer groups: the statistical checks are skipped (too few clusters)
    max_pairs: int = 20000  # audit the newest this-many pairs (keeps an audit well under a second)
    folds: int = 5
    z_crit: float = 3.0  # an effect must be this many clustered standard errors above zero
    min_task_clusters: int = 8  # with this many tasks, z is also clustered by task (the smaller z counts)
    persist: int = 3  # consecutive flagged audits before a check warns
    max_monotonicity_ratio: float = 0.05  # RMS of the missed structure / within-group sd of r_hat
    max_stationarity_ratio: float = 0.05  # RMS of the drift / within-group sd of r_hat
    max_task_p: float = 1e-3  # F test of "no per-task offset"
    min_task_sd: float = 0.03  # score units: a smaller spread of task offsets is not reported
    stationarity_window: int = 0  # recent pairs; 0: max(recent_window, n // 4)
    min_old_pairs: int = 100
    min_overlap: int = 50  # recent pairs inside the older pairs' range needed to judge drift
    overlap_quantile: float = 0.05  # "inside the range": between these quantiles of the older r
    n_bins: int = 25  # flexible fit: isotonic + a residual mean in each of this many equal-width bins of r
    shrink: float = 10.0  # ... shrunk towards the isotonic fit by this many pseudo-pairs
    high_quantile: float = 0.9  # "the high range GRPO chases": top 10% of the world-model scores
    high_score: float = 0.7  # a "high" true score
    min_support: int = 10  # anchor pairs needed under the high range
    min_support_groups: int = 3  # ... from at least this many groups
    named_tasks: int = 5  # at most this many tasks named in a warning
    top_quantile: float = 0.75  # flat_top: "a high true score" = at least this quantile of the r > 0
    min_top_pairs: int = 50  # ... with this many such pairs
    min_top_groups: int = 8  # ... from this many groups (the bootstrap's clusters)
    min_top_rank: float = 0.3  # flag when the bootstrap upper bound of the top Spearman is below this
    top_bootstrap: int = 200  # group-clustered bootstrap resamples
    top_alpha: float = 0.05  # one-sided: the upper bound is the (1 - top_alpha) bootstrap quantile


@dataclass
class AuditReport:
    n_pairs: int
    n_groups: int
    n_tasks: int
    spread: float  # within-group sd of r_hat (score units): the scale effects are judged against
    # What each check measured; NaN / 0 / empty where it did not run.
    monotonicity_effect: float = NAN  # RMS the isotonic phi misses, held out (score units)
    monotonicity_gain: float = NAN  # the same as a relative MSE reduction
    monotonicity_z: float = NAN
    stationarity_effect: float = NAN  # RMS by which the older phi misses the recent pairs (score units)
    stationarity_gap: float = NAN  # the same as a relative MSE excess
    stationarity_z: float = NAN
    map_lag_gap: float = NAN  # the same for f_hat on all recent pairs (reported, never warned about)
    stationarity_window: int = 0  # the recent pairs
    task_share: float = NAN  # share of the calibrated residual variance f_hat(r_hat) - r explained by task
    wm_task_share: float = NAN  # share of the world model's residual r_hat - phi(r) explained by task
    task_sd: float = NAN  # sd of the world model's per-task offsets (score units)
    task_p: float = NAN  # F test p-value of "no per-task offset"
    # named tasks: their offset r_hat - phi(r) minus the overall mean
    task_offsets: dict[str, float] = field(default_factory=dict)
    high_threshold: float = NAN  # r_hat at the high_quantile of the chased scores
    n_support_high: int = 0  # pool pairs with r_hat >= high_threshold
    n_groups_high: int = 0  # ... and the groups they come from
    high_true_frac: float = NAN  # fraction of recent anchors with r >= high_score
    thresholds: AuditThresholds = field(default_factory=AuditThresholds)
    flags: list[str] = field(default_factory=list)  # checks that flagged at this audit
    streaks: dict[str, int] = field(default_factory=dict)  # consecutive flagged audits per check
    warnings: list[str] = field(default_factory=list)  # flags that persisted
    skipped: list[str] = field(default_factory=list)  # checks not run, with the reason
    checked: list[str] = field(default_factory=list)  # checks that ran (flagged or not), in the order of CHECKS
    top_rank: float = NAN  # Spearman of r_hat and r among the pairs with a high true score
    top_rank_upper: float = NAN  # its bootstrap upper bound
    n_top: int = 0  # the pairs it was computed on

    @property
    def ok(self) -> bool:
        return not self.warnings

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ok"] = self.ok
        return d


def _flexible(x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, t: AuditThresholds) -> tuple[
    np.ndarray, np.ndarray
]:
    """(isotonic, flexible) predictions at x_test. The flexible fit is the isotonic one plus the mean
    isotonic residual of the training pairs in each of ``n_bins`` equal-width bins of x, shrunk by
    ``shrink`` pseudo-pairs: it can follow a bump the monotone fit flattens, and where a bin has few
    pairs it stays close to the isotonic fit instead of paying for its own variance. (Quantile bins
    lose a narrow bump once the policy concentrates on a few scores.)"""
    knots = fit_isotonic(x_train, y_train)
    iso_train, iso_test = apply_map(*knots, x_train), apply_map(*knots, x_test)
    b_train = np.minimum((x_train * t.n_bins).astype(np.int64), t.n_bins - 1)
    b_test = np.minimum((x_test * t.n_bins).astype(np.int64), t.n_bins - 1)
    counts = np.bincount(b_train, minlength=t.n_bins)
    sums = np.bincount(b_train, weights=y_train - iso_train, minlength=t.n_bins)
    return iso_test, iso_test + (sums / (counts + t.shrink))[b_test]


def _z(d: np.ndarray, groups: np.ndarray, tasks: np.ndarray | None, t: AuditThresholds) -> float:
    """Clustered by group; with enough tasks also by task, and the smaller z counts."""
    z = clustered_z(d, groups)[1]
    if tasks is not None and len(np.unique(tasks)) >= t.min_task_clusters:
        z = min(z, clustered_z(d, tasks)[1])
    return z


def _effect(d: np.ndarray, ref: np.ndarray) -> tuple[float, float]:
    """(RMS effect in score units, relative MSE change) of per-pair squared-error differences."""
    mean, base = float(d.mean()), float(ref.mean())
    return math.sqrt(max(mean, 0.0)), (mean / base if base > 0 else 0.0)


def monotonicity(
    true: np.ndarray, pred: np.ndarray, groups: np.ndarray, tasks: np.ndarray | None, t: AuditThresholds
) -> tuple[float, float, float]:
    """(a): (effect, relative gain, z) of binned means over isotonic, both fitting phi = E[r_hat | r]."""
    err_iso, err_flex = np.empty(len(true)), np.empty(len(true))
    for test in group_folds(groups, t.folds):
        train = np.ones(len(true), dtype=bool)
        train[test] = False
        iso, flex = _flexible(true[train], pred[train], true[test], t)
        err_iso[test], err_flex[test] = (iso - pred[test]) ** 2, (flex - pred[test]) ** 2
    d = err_iso - err_flex
    return (*_effect(d, err_iso), _z(d, groups, tasks, t))


def old_vs_recent(
    x: np.ndarray, y: np.ndarray, groups: np.ndarray, tasks: np.ndarray | None, window: int,
    t: AuditThresholds, *, overlap: bool,
) -> tuple[float, float, float, int]:
    """(b): an isotonic map of y on x fit on the older pairs vs one fit on held-out recent groups,
    scored on the recent pairs (only those with x inside the older range if ``overlap``).
    Returns (effect, relative gap, z, number scored); NaNs when fewer than ``min_overlap`` scored."""
    old_x, old_y, rx, ry = x[:-window], y[:-window], x[-window:], y[-window:]
    rg = groups[-window:]
    scored = np.ones(window, dtype=bool)
    if overlap:
        lo, hi = np.quantile(old_x, [t.overlap_quantile, 1.0 - t.overlap_quantile])
        scored = (rx >= lo) & (rx <= hi)
    nan = float("nan")
    if scored.sum() < t.min_overlap or len(np.unique(rg)) < 2:
        return nan, nan, nan, int(scored.sum())
    err_old = (apply_map(*fit_isotonic(old_x, old_y), rx) - ry) ** 2
    err_new = np.empty(window)
    for test in group_folds(rg, t.folds):
        train = np.ones(window, dtype=bool)
        train[test] = False
        err_new[test] = (apply_map(*fit_isotonic(rx[train], ry[train]), rx[test]) - ry[test]) ** 2
    d = (err_old - err_new)[scored]
    rt = None if tasks is None else tasks[-window:][scored]
    return (*_effect(d, err_new[scored]), _z(d, rg[scored], rt, t), int(scored.sum()))


def _names(offsets: Mapping[str, float], z: Mapping[str, float], t: AuditThresholds, n_tasks: int) -> dict[str, float]:
    """Tasks whose offset is significant after a Bonferroni correction over tasks, largest first."""
    from scipy.stats import norm

    crit = float(norm.isf(t.max_task_p / (2 * n_tasks)))
    hits = [k for k in offsets if abs(z[k]) > crit and abs(offsets[k]) >= t.min_task_sd]
    hits.sort(key=lambda k: -abs(offsets[k]))
    return {k: offsets[k] for k in hits[: t.named_tasks]}


def _spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Rank correlation with average ranks for ties; 0 when r_hat is constant (it ranks nothing)."""
    from scipy.stats import rankdata

    rx, ry = rankdata(x), rankdata(y)
    sx, sy = rx.std(), ry.std()
    if not sx > 0:
        return float("nan")
    return 0.0 if not sy > 0 else float(np.mean((rx - rx.mean()) * (ry - ry.mean())) / (sx * sy))


def top_rank(true: np.ndarray, pred: np.ndarray, groups: np.ndarray, t: AuditThresholds) -> tuple[float, float, int]:
    """(e): (Spearman of r and r_hat among the pairs with a high true score, its group-clustered bootstrap
    upper bound, the pairs used); NaNs when too few pairs or groups, or one true score only.

    r_hat is first cleared of the error its group shares (a misread task overview): the leave-one-out
    mean, over the group's other pairs, of r_hat - phi(r) (phi isotonic on the pool). Such an offset does
    not hurt ranking inside the group, where GRPO's advantages are taken, but would blur the ranking across
    groups that the check measures (the high pairs of one group are few: ranking only within groups
    leaves too few, and too similar, scores to rank)."""
    nan = float("nan")
    ran = true > 0.0  # crashes (r = 0) are the bottom, not the top
    if ran.sum() < t.min_top_pairs:
        return nan, nan, 0
    resid = pred - apply_map(*fit_isotonic(true, pred), true)
    _, g_all = np.unique(groups, return_inverse=True)
    size = np.bincount(g_all).astype(np.float64)
    total = np.bincount(g_all, weights=resid)
    others = np.maximum(size[g_all] - 1.0, 1.0)
    cleared = pred - np.where(size[g_all] > 1, (total[g_all] - resid) / others, 0.0)
    top = np.flatnonzero(ran & (true >= np.quantile(true[ran], t.top_quantile)))
    x, y = true[top], cleared[top]
    _, g = np.unique(groups[top], return_inverse=True)
    corr = _spearman(x, y)
    if len(top) < t.min_top_pairs or g.max() + 1 < t.min_top_groups or math.isnan(corr):
        return nan, nan, len(top)
    members = [np.flatnonzero(g == c) for c in range(int(g.max()) + 1)]
    rng = np.random.default_rng(len(top))  # its own seeded stream: the audit never draws from the run's RNG
    boots = []
    for _ in range(t.top_bootstrap):
        idx = np.concatenate([members[i] for i in rng.integers(len(members), size=len(members))])
        boots.append(_spearman(x[idx], y[idx]))
    return corr, float(np.nanquantile(boots, 1.0 - t.top_alpha)), len(top)


@dataclass(frozen=True)
class _Pool:
    """The audited pairs (the newest ``max_pairs``, insertion order), groups and tasks as integer codes."""

    pred: np.ndarray  # r_hat
    true: np.ndarray  # r
    groups: np.ndarray  # group codes
    tasks: np.ndarray | None  # task codes; None: no task ids
    task_names: np.ndarray | None  # the name of each task code
    window: int  # the recent pairs
    spread: float  # within-group sd of r_hat (NaN without pairs)

    @property
    def n_groups(self) -> int:
        return int(self.groups.max()) + 1 if len(self.groups) else 0

    @property
    def scale(self) -> float:
        """What effects are judged against: the within-group spread of r_hat; without any (constant
        groups), 1 score unit."""
        return self.spread if self.spread > 0 else 1.0


def _pool(
    predicted: np.ndarray, true: np.ndarray, groups: Sequence[str] | None, tasks: Sequence[str] | None,
    recent_window: int, t: AuditThresholds,
) -> _Pool:
    pred = as_scores("audit predicted", predicted)[-t.max_pairs :]
    true = as_scores("audit true", true)[-t.max_pairs :]
    if len(pred) != len(true):
        raise ValueError(f"audit: {len(pred)} predicted but {len(true)} true scores")
    n = len(pred)
    for name, labels in (("groups", groups), ("tasks", tasks)):
        if labels is not None and len(labels[-t.max_pairs :]) != n:
            raise ValueError(f"audit: {n} pairs but {len(labels)} {name}")
    # Integer codes from here on (np.unique on strings dominates an audit otherwise).
    g = np.arange(n) if groups is None else codes_of(np.asarray(groups, dtype=object)[-t.max_pairs :])
    task_names, k = (None, None) if tasks is None else np.unique(
        np.asarray(tasks, dtype=object)[-t.max_pairs :], return_inverse=True
    )
    window = min(t.stationarity_window or max(recent_window, n // 4), n)
    spread = math.sqrt(within_group_variance(pred, g)) if n else float("nan")
    return _Pool(pred, true, g, k, task_names, window, spread)


@dataclass(frozen=True)
class Finding:
    """What one check found: the report's fields it measured, and the warning text when it flagged or
    the reason when it could not judge (at most one of the two)."""

    values: dict[str, Any] = field(default_factory=dict)
    flagged: str | None = None
    skipped: str | None = None


def check_monotonicity(pool: _Pool, t: AuditThresholds) -> Finding:
    """(a), module doc."""
    eff, gain, z = monotonicity(pool.true, pool.pred, pool.groups, pool.tasks, t)
    values = {"monotonicity_effect": eff, "monotonicity_gain": gain, "monotonicity_z": z}
    scale = pool.scale
    if eff / scale > t.max_monotonicity_ratio and z > t.z_crit:
        return Finding(values, flagged=(
            "world-model bias looks non-monotone: a flexible fit of r_hat against the true score beats "
            f"the isotonic fit by an RMS of {eff:.3f} score units ({eff / scale:.0%} of the within-group "
            f"spread of r_hat, held-out groups, z = {z:.1f} clustered by group); Assumption 6 fails and "
            "the debiasing correction cannot be trusted"
        ))
    return Finding(values)


def check_stationarity(pool: _Pool, t: AuditThresholds) -> Finding:
    """(b), module doc."""
    true, pred, g, n, window = pool.true, pool.pred, pool.groups, len(pool.pred), pool.window
    if n - window < t.min_old_pairs or window < 2 * t.folds:
        return Finding(skipped=f"stationarity: needs {t.min_old_pairs} pairs older than the recent {window}, "
                               f"has {n - window}")
    eff, gap, z, scored = old_vs_recent(true, pred, g, pool.tasks, window, t, overlap=True)
    values = {
        "stationarity_effect": eff, "stationarity_gap": gap, "stationarity_z": z,
        "map_lag_gap": old_vs_recent(pred, true, g, None, window, t, overlap=False)[1],
    }
    if math.isnan(gap):
        return Finding(values, skipped=(
            f"stationarity: only {scored} of the last {window} anchors have a true score inside "
            f"the older anchors' range (need {t.min_overlap}); the policy moved too far to tell "
            "drift from the move"
        ))
    if eff / pool.scale > t.max_stationarity_ratio and z > t.z_crit:
        return Finding(values, flagged=(
            f"world-model bias drifts: on the last {window} anchor pairs, phi fit on them predicts "
            f"r_hat better than phi fit on older pairs by an RMS of {eff:.3f} score units "
            f"({eff / pool.scale:.0%} of the within-group spread, z = {z:.1f} clustered by group); "
            "the pool-wide debiasing map mixes old and new bias"
        ))
    return Finding(values)


def check_task_bias(pool: _Pool, t: AuditThresholds) -> Finding:
    """(c), module doc."""
    true, pred, g, k = pool.true, pool.pred, pool.groups, pool.tasks
    if k is None or pool.task_names is None:
        return Finding(skipped="per-task bias: the pairs carry no task ids")
    if len(pool.task_names) < 2:
        return Finding(skipped="per-task bias: the pairs come from one task")
    # Tested on the world model's side, r_hat - phi(r), phi fit with the task held out: f_hat(r_hat)
    # - r also differs by task when tasks merely score differently (E[r | r_hat] shrinks each task
    # towards the pool's mean), but phi = E[r_hat | r] does not depend on which scores a task has.
    effects = task_effects(pred - cross_fitted(true, pred, k, t.folds), g, k)
    calibrated = task_effects(cross_fitted(pred, true, g, t.folds) - true, g, k)
    if effects is None or calibrated is None:
        return Finding(skipped="per-task bias: needs a task with two groups")
    named = _names(effects.means, effects.z, t, effects.n_tasks)
    offsets = {str(pool.task_names[int(code)]): v for code, v in named.items()}
    values = {"task_share": calibrated.share, "wm_task_share": effects.share, "task_sd": effects.sd,
              "task_p": effects.p_value, "task_offsets": offsets}
    if effects.p_value < t.max_task_p and effects.sd >= t.min_task_sd and offsets:
        names = ", ".join(f"{name} ({v:+.2f})" for name, v in offsets.items())
        return Finding(values, flagged=(
            f"world-model bias differs by task: per-task offsets of sd {effects.sd:.3f} score units "
            f"(F test p = {effects.p_value:.1e}, groups as units); task explains "
            f"{calibrated.share:.0%} of the calibrated residual variance; tasks most off (r_hat "
            f"above or below phi(r)): {names}; one global debiasing map cannot correct a "
            "per-task bias"
        ))
    return Finding(values)


def check_coverage(pool: _Pool, chased: np.ndarray | None, t: AuditThresholds) -> Finding:
    """(d), module doc."""
    pred, window = pool.pred, pool.window
    chased_scores = pred[-window:] if chased is None or len(chased) == 0 else as_scores("chased", chased)
    threshold = float(np.quantile(chased_scores, t.high_quantile))
    high = pred >= threshold
    support, support_groups = int(np.count_nonzero(high)), len(np.unique(pool.groups[high]))
    values = {"high_threshold": threshold, "n_support_high": support, "n_groups_high": support_groups,
              "high_true_frac": float(np.mean(pool.true[-window:] >= t.high_score))}
    if support < t.min_support or support_groups < t.min_support_groups:
        return Finding(values, flagged=(
            f"anchors do not cover the high scores GRPO chases: the top {1 - t.high_quantile:.0%} of "
            f"world-model scores (r_hat >= {threshold:.2f}) rest on only "
            f"{support} anchor pairs from {support_groups} groups (need "
            f"{t.min_support} from {t.min_support_groups}); the debiasing map there is an extrapolation"
        ))
    return Finding(values)


def check_flat_top(pool: _Pool, t: AuditThresholds) -> Finding:
    """(e), module doc."""
    rank, upper, n_top = top_rank(pool.true, pool.pred, pool.groups, t)
    values = {"top_rank": rank, "top_rank_upper": upper, "n_top": n_top}
    if math.isnan(upper):
        return Finding(values, skipped=(
            f"flat_top: {n_top} anchor pairs with a high true score; needs {t.min_top_pairs} from "
            f"{t.min_top_groups} groups, with distinct true scores"
        ))
    if upper < t.min_top_rank:
        return Finding(values, flagged=(
            f"the world model cannot rank at the top: among the {n_top} anchor pairs with a high true "
            f"score the rank correlation of r_hat and r is {rank:.2f} (bootstrap upper bound "
            f"{upper:.2f} < {t.min_top_rank}); its scores do not separate the best "
            "solutions, only the anchor stream does (see algorithm.on_flat_world_model)"
        ))
    return Finding(values)


def _update_streaks(report: AuditReport, previous: Mapping[str, int] | None, t: AuditThresholds) -> int:
    """Streaks per check; returns how many consecutive flags make a warning."""
    for check in CHECKS:
        report.streaks[check] = (previous or {}).get(check, 0) + 1 if check in report.flags else 0
    return 1 if previous is None else t.persist


def audit_pool(
    predicted: np.ndarray,
    true: np.ndarray,
    *,
    groups: Sequence[str] | None = None,
    tasks: Sequence[str] | None = None,
    chased: np.ndarray | None = None,
    recent_window: int = 128,
    thresholds: AuditThresholds | None = None,
    streaks: Mapping[str, int] | None = None,
) -> AuditReport:
    """Audit Assumption 6 on pool arrays (insertion order).

    ``groups``/``tasks``: the GRPO group and task of each pair (None: every pair its own group; no task
    check). ``chased``: recent world-model scores that were calibrated (the range GRPO pushes into);
    without it, the pool's recent r_hat stand in. ``streaks``: the previous audit's, for the
    persistence rule (None: a one-off audit, a flag warns at once).
    """
    t = thresholds or AuditThresholds()
    pool = _pool(predicted, true, groups, tasks, recent_window, t)
    n = len(pool.pred)
    skipped: list[str] = []
    findings: dict[str, Finding] = {}
    if n < t.min_pairs or pool.n_groups < t.min_groups:
        skipped.append(
            f"all checks: only {n} anchor pairs in {pool.n_groups} groups; the audit needs {t.min_pairs} "
            f"pairs in {t.min_groups} groups"
        )
    else:  # in the order of CHECKS
        findings = {
            "monotonicity": check_monotonicity(pool, t),
            "stationarity": check_stationarity(pool, t),
            "task_bias": check_task_bias(pool, t),
            "coverage": check_coverage(pool, chased, t),
            "flat_top": check_flat_top(pool, t),
        }
    messages = {check: finding.flagged for check, finding in findings.items() if finding.flagged is not None}
    report = AuditReport(
        n_pairs=n,
        n_groups=pool.n_groups,
        n_tasks=0 if pool.task_names is None else len(pool.task_names),
        spread=pool.spread,
        stationarity_window=pool.window,
        thresholds=t,
        **{key: value for finding in findings.values() for key, value in finding.values.items()},
        flags=list(messages),
        checked=[check for check, finding in findings.items() if finding.skipped is None],
        skipped=skipped + [finding.skipped for finding in findings.values() if finding.skipped is not None],
    )
    persist = _update_streaks(report, streaks, t)
    report.warnings = [
        messages[c] + (f" [flagged at {report.streaks[c]} consecutive audits]" if persist > 1 else "")
        for c in report.flags
        if report.streaks[c] >= persist
    ]
    return report
