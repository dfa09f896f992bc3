"""Clustered statistics for the audit: anchor pairs of one GRPO group (or one task) are not independent.

A world model that misreads a task's overview misleads it for every trajectory of that task, so the
errors of a group's pairs share a component. A z-score or a fold that treats the pairs as independent
then mistakes that shared error for signal (issue 7: 38/40 false drift warnings at a per-group offset of
sd 0.2). Everything here works on cluster labels instead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats


def codes_of(labels: Sequence[str] | np.ndarray) -> np.ndarray:
    """Integer codes 0..k-1 of arbitrary labels."""
    # a unicode array sorts like the strings do, several times faster than an object array
    return np.unique(np.asarray(labels), return_inverse=True)[1].astype(np.int64)


def clustered_z(values: np.ndarray, clusters: np.ndarray) -> tuple[float, float]:
    """Mean of ``values`` and its z-score with a cluster-robust standard error (CR1).

    se^2 = G/(G-1) * sum_g (sum_{i in g} (v_i - mean))^2 / N^2. Returns (mean, z); z = 0 when the
    standard error is zero or there are fewer than two clusters.
    """
    n = len(values)
    if n == 0:
        return float("nan"), 0.0
    mean = float(values.mean())
    codes = codes_of(clusters)
    g = int(codes.max()) + 1
    if g < 2:
        return mean, 0.0
    sums = np.bincount(codes, weights=values - mean, minlength=g)
    var = g / (g - 1) * float((sums**2).sum()) / n**2
    if not var > 0.0:
        return mean, 0.0
    return mean, mean / math.sqrt(var)


def within_group_variance(values: np.ndarray, groups: Sequence[str] | np.ndarray) -> float:
    """Mean over groups (with >= 2 members here) of the population variance of their values.

    NaN when no group has two members. A group cut by a window's edge counts with the members it has
    there. The denoiser normalises eta2 by it (Eq. 5); the audit reads its square root as the spread.
    """
    if len(values) != len(groups):
        raise ValueError(f"{len(values)} scores but {len(groups)} group ids")
    codes = codes_of(groups)
    counts = np.bincount(codes)
    keep = counts >= 2
    if not keep.any():
        return float("nan")
    mean = np.bincount(codes, weights=values) / counts
    var = np.bincount(codes, weights=(values - mean[codes]) ** 2) / counts  # two-pass: no cancellation
    return float(var[keep].mean())


@dataclass(frozen=True)
class TaskEffects:
    """One-way random-effects ANOVA of residuals on task, with group means as the units."""

    share: float  # sigma^2_task / variance of the pair residuals
    sd: float  # sigma_task, score units
    p_value: float  # F test of "no task effect" (df: tasks - 1, groups - tasks)
    n_tasks: int
    means: dict[str, float]  # per task: mean residual minus the overall mean, score units
    z: dict[str, float]  # per task: that deviation over its standard error


def task_effects(residual: np.ndarray, groups: np.ndarray, tasks: np.ndarray) -> TaskEffects | None:
    """How much of the residual variance is a per-task offset; None when it cannot be estimated
    (fewer than two tasks, or no task with two groups)."""
    g_codes = codes_of(groups)
    n_groups = int(g_codes.max()) + 1
    g_count = np.bincount(g_codes, minlength=n_groups)
    g_mean = np.bincount(g_codes, weights=residual, minlength=n_groups) / g_count
    # the task of each group (a group has one task; the first pair's is taken)
    first = np.zeros(n_groups, dtype=np.int64)
    first[g_codes[::-1]] = np.arange(len(g_codes))[::-1]
    task_labels = np.asarray(tasks, dtype=object)[first]
    names, t_codes = np.unique(task_labels, return_inverse=True)
    n_tasks = len(names)
    t_count = np.bincount(t_codes, minlength=n_tasks)
    if n_tasks < 2 or n_groups - n_tasks < 1:
        return None
    t_mean = np.bincount(t_codes, weights=g_mean, minlength=n_tasks) / t_count
    grand = float(g_mean.mean())
    ms_between = float((t_count * (t_mean - grand) ** 2).sum()) / (n_tasks - 1)
    ms_within = float(((g_mean - t_mean[t_codes]) ** 2).sum()) / (n_groups - n_tasks)
    g0 = (n_groups - float((t_count**2).sum()) / n_groups) / (n_tasks - 1)
    var_task = max((ms_between - ms_within) / g0, 0.0)
    total = float(residual.var())
    if ms_within > 0.0:
        p = float(stats.f.sf(ms_between / ms_within, n_tasks - 1, n_groups - n_tasks))
        se = np.sqrt(ms_within / t_count)
    else:
        p = 0.0 if ms_between > 0.0 else 1.0
        se = np.full(n_tasks, np.inf)
    dev = t_mean - grand
    return TaskEffects(
        share=var_task / total if total > 0.0 else 0.0,
        sd=math.sqrt(var_task),
        p_value=p,
        n_tasks=n_tasks,
        means={str(k): float(v) for k, v in zip(names, dev, strict=True)},
        z={str(k): float(d / s) if s > 0 else 0.0 for k, d, s in zip(names, dev, se, strict=True)},
    )
