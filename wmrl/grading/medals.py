"""MLE-bench's medal and above-median flags (Kaggle's progression thresholds).

The board is read as ranked in its file (best first); N counts every row. Thresholds are the
scores at fixed positions, depending on N:

    N < 100:        gold 10%, silver 20%, bronze 40% of N (at least position 1)
    100 <= N < 250: gold position 10, silver 20%, bronze 40%
    250 <= N < 1000: gold 10 + 0.2% of N, silver position 50, bronze position 100
    N >= 1000:      gold 10 + 0.2% of N, silver 5%, bronze 10%

A score earns the best medal whose threshold it ties or beats; "above median" is strictly better
than the median of the board's scores. An invalid submission earns nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from wmrl.grading.leaderboard import Leaderboard, LeaderboardError
from wmrl.grading.metrics import MAXIMIZE


@dataclass(frozen=True)
class Medal:
    medal: str  # "gold", "silver", "bronze" or "" (none)
    above_median: bool
    thresholds: dict[str, float]


def _positions(n: int) -> tuple[int, int, int]:
    if n < 100:
        return max(1, int(n * 0.1)), max(1, int(n * 0.2)), max(1, int(n * 0.4))
    if n < 250:
        return 10, max(1, int(n * 0.2)), max(1, int(n * 0.4))
    if n < 1000:
        return 10 + int(n * 0.002), 50, 100
    return 10 + int(n * 0.002), max(1, int(n * 0.05)), max(1, int(n * 0.1))


def thresholds(board: Leaderboard) -> dict[str, float]:
    ranked = board.file_scores or board.scores
    gold, silver, bronze = (ranked[p - 1] for p in _positions(len(ranked)))
    finite = [s for s in ranked if not math.isnan(s)]
    if not finite:
        raise LeaderboardError("leaderboard has no scores to take a median of")
    return {"gold": float(gold), "silver": float(silver), "bronze": float(bronze), "median": float(np.median(finite))}


def medal_for(score: float | None, board: Leaderboard) -> Medal:
    limits = thresholds(board)
    if score is None or not math.isfinite(score):
        return Medal("", False, limits)
    higher = board.direction == MAXIMIZE

    def reaches(limit: float) -> bool:
        return score >= limit if higher else score <= limit

    medal = next((name for name in ("gold", "silver", "bronze") if reaches(limits[name])), "")
    above = score > limits["median"] if higher else score < limits["median"]
    return Medal(medal, above, limits)
