"""Paired comparisons over seeds: a seed is the same start for every variant (same initial policy, same
task order, same simulator draws), so two variants are compared on their per-seed differences.

The t-interval of the mean difference, the two-sided paired t-test, and the design's power: the chance
that a true difference ``delta`` would be found significant at level ``alpha`` with ``n`` pairs whose
differences have standard deviation ``sd`` (noncentral t), and the pairs that 80% power needs.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import stats

ALPHA = 0.05
TARGET_POWER = 0.8


@dataclass(frozen=True)
class Paired:
    n: int  # pairs (seeds both variants ran)
    mean: float  # mean of b - a
    sd: float  # sample standard deviation of the differences (ddof 1)
    se: float
    ci95: tuple[float, float]  # t-interval, n - 1 degrees of freedom
    t: float
    p: float  # two-sided

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ci95": list(self.ci95)}


def paired(a: dict[int, float], b: dict[int, float]) -> Paired:
    """``b - a`` over the seeds both hold (``{seed: value}``); NaN statistics with fewer than 2 pairs."""
    seeds = sorted(set(a) & set(b))
    d = np.array([b[s] - a[s] for s in seeds], dtype=float)
    n = len(d)
    if n < 2:
        mean = float(d.mean()) if n else math.nan
        return Paired(n, mean, math.nan, math.nan, (math.nan, math.nan), math.nan, math.nan)
    sd = float(d.std(ddof=1))
    se = sd / math.sqrt(n)
    half = float(stats.t.ppf(1 - ALPHA / 2, n - 1)) * se
    t = float(d.mean() / se) if se > 0 else math.copysign(math.inf, float(d.mean())) if d.mean() else math.nan
    p = float(2 * stats.t.sf(abs(t), n - 1)) if math.isfinite(t) else (0.0 if math.isinf(t) else math.nan)
    return Paired(n, float(d.mean()), sd, se, (float(d.mean()) - half, float(d.mean()) + half), t, p)


def power(delta: float, sd: float, n: int, alpha: float = ALPHA) -> float:
    """Power of the two-sided paired t-test at true difference ``delta``, ``n`` pairs of sd ``sd``."""
    if n < 2 or not sd > 0:
        return math.nan
    df, ncp = n - 1, delta / (sd / math.sqrt(n))
    crit = float(stats.t.ppf(1 - alpha / 2, df))
    # P(T < -crit | ncp) as P(T > crit | -ncp): scipy's nct.cdf returns NaN deep in that tail (a large
    # ncp with few pairs), where sf gives the (tiny) value
    return float(stats.nct.sf(crit, df, ncp) + stats.nct.sf(crit, df, -ncp))


def pairs_for_power(delta: float, sd: float, target: float = TARGET_POWER, alpha: float = ALPHA,
                    most: int = 10_000) -> int | None:
    """The fewest pairs whose power at ``delta`` reaches ``target`` (None beyond ``most``)."""
    if not sd > 0:
        return None
    for n in range(2, most + 1):
        if power(delta, sd, n, alpha) >= target:
            return n
    return None
