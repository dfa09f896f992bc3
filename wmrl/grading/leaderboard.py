"""Leaderboard and the MLE-Dojo position score.

``position`` is the 1-based index of the first leaderboard entry (best first) that the score ties
or beats; a score that beats nobody gets ``N + 1``. The position score is ``(N - position + 1) / N``
in ``[0, 1]``: 1 for tying or beating the winner, 0 for losing to everyone.

Leaderboards store rounded scores (Kaggle shows 5-6 digits; our builder writes 6), so "ties" means
equal at that precision: a score within ``TIE_TOLERANCE`` (relative, at least absolute) of an entry
ties it. Without this, re-running a reference solution would land one place below its own entry
whenever rounding went up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from wmrl.grading.metrics import DIRECTIONS, MAXIMIZE

TIE_TOLERANCE = 1e-6


class LeaderboardError(ValueError):
    """A leaderboard file is missing, unreadable or has no usable score column."""


@dataclass(frozen=True)
class Leaderboard:
    scores: tuple[float, ...]  # best first
    direction: str

    def __post_init__(self) -> None:
        if self.direction not in DIRECTIONS:
            raise LeaderboardError(f"direction={self.direction!r}; allowed: {', '.join(DIRECTIONS)}")
        if not self.scores:
            raise LeaderboardError("leaderboard has no entries")

    @classmethod
    def from_scores(cls, scores: list[float], direction: str) -> Leaderboard:
        clean = [float(s) for s in scores if s is not None and math.isfinite(float(s))]
        return cls(tuple(sorted(clean, reverse=direction == MAXIMIZE)), direction)

    def __len__(self) -> int:
        return len(self.scores)

    def position(self, score: float) -> int:
        for index, entry in enumerate(self.scores, start=1):
            slack = TIE_TOLERANCE * max(1.0, abs(entry))
            ties_or_beats = score >= entry - slack if self.direction == MAXIMIZE else score <= entry + slack
            if ties_or_beats:
                return index
        return len(self.scores) + 1

    def position_score(self, score: float) -> float:
        if not math.isfinite(score):
            return 0.0
        n = len(self.scores)
        return (n - self.position(score) + 1) / n


def read_leaderboard(path: Path, direction: str) -> Leaderboard:
    """Read a leaderboard CSV with a ``score`` column (MLE-bench also calls it ``scoreNullable``).

    Entries with a missing score (MLE-bench keeps disqualified teams) are dropped. Order in the file
    does not matter: entries are re-sorted by ``direction``.
    """
    path = Path(path)
    if not path.is_file():
        raise LeaderboardError(f"leaderboard file not found: {path}")
    try:
        frame = pd.read_csv(path)
    except Exception as err:  # pandas raises many types for malformed CSV
        raise LeaderboardError(f"{path}: not a readable CSV: {err}") from err
    column = next((c for c in ("score", "scoreNullable", "Score") if c in frame.columns), None)
    if column is None:
        raise LeaderboardError(f"{path}: no 'score' column; columns are {list(frame.columns)}")
    values = pd.to_numeric(frame[column], errors="coerce").dropna().tolist()
    if not values:
        raise LeaderboardError(f"{path}: column '{column}' has no numeric scores")
    return Leaderboard.from_scores(values, direction)
