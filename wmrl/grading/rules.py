"""How a benchmark turns a raw score into a reward: the parts that differ between benchmarks.

The built-in pool, MLE-Dojo and MLE-bench agree on the metric but not on the rest: which boards
are averaged, whether near-ties count, whether the raw score is rounded first, which probability
rows are valid, whether medals are awarded. Each task carries one ``GradingRules``; the loaders
set it (see docs/tasks.md), the grader follows it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

BOARDS = ("private", "mean")


@dataclass(frozen=True)
class GradingRules:
    # Relative tolerance under which a score ties a board entry; 0 = exact comparison.
    tie_tolerance: float = 0.0
    # "mean": the position score is the mean over the private and public boards that exist
    # (MLE-Dojo's reward); "private": the private board only.
    boards: str = "private"
    # Round the raw score to this many decimals before placing it (MLE-bench rounds to 5).
    round_digits: int | None = None
    # Refuse probability rows that do not sum to one within this absolute tolerance, or hold a
    # value outside [0, 1] (MLE-bench's log-loss graders); None = no such check.
    probability_sum_atol: float | None = None
    # Report MLE-bench's medal and above-median flags from the board's thresholds.
    medals: bool = False

    def __post_init__(self) -> None:
        if self.boards not in BOARDS:
            raise ValueError(f"boards={self.boards!r}; allowed: {', '.join(BOARDS)}")
        if not (math.isfinite(self.tie_tolerance) and self.tie_tolerance >= 0):
            raise ValueError(f"tie_tolerance={self.tie_tolerance!r}; must be a finite number >= 0")
        if self.round_digits is not None and self.round_digits < 0:
            raise ValueError(f"round_digits={self.round_digits!r}; must be >= 0")
