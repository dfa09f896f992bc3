"""Leaderboard and the MLE-Dojo position score.

``position`` is the 1-based index of the first leaderboard entry (best first) that the score ties
or beats; a score that beats nobody gets ``N + 1``. The position score is ``(N - position + 1) / N``
in ``[0, 1]``: 1 for tying or beating the winner, 0 for losing to everyone.

Ties are exact comparisons (MLE-Dojo's and MLE-bench's rule) unless a board is read with a
``tie_tolerance``: then a score within that relative distance (at least absolute) of an entry ties
it. The built-in pool turns it on (1e-6) because its boards store scores rounded to 6 decimals:
without it, re-running a reference would land one place below its own entry whenever rounding
went up.

Rows without a score (a disqualified team) stay in ``N`` and are never tied or beaten, as in
MLE-Dojo, which counts every row of the file. Positions walk the rows as MLE-Dojo orders them:
Python's sort of the file's scores, in which an empty (NaN) row keeps its place relative to its
neighbours, so it can shadow the entries behind it. No real MLE-Dojo board has an empty score
(results/pools/survey.md); the rule only keeps wmrl's score equal to MLE-Dojo's if one does.
A score that is present but not a number is an error naming the file, line and value: a silently
shorter board would inflate every position score.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from wmrl.grading.metrics import DIRECTIONS, MAXIMIZE

BUILTIN_TIE_TOLERANCE = 1e-6  # the built-in pool's boards are rounded to 6 decimals
SCORE_COLUMNS = ("score", "scoreNullable", "Score")  # MLE-bench's rank_score reads "score" first
LFS_POINTER_PREFIX = "version https://git-lfs.github.com/spec/"


class LeaderboardError(ValueError):
    """A leaderboard file is missing, unreadable or has no usable score column."""


@dataclass(frozen=True)
class Leaderboard:
    scores: tuple[float, ...]  # numeric entries, best first
    direction: str
    tie_tolerance: float = 0.0  # relative; 0 = exact comparison
    empty: int = 0  # rows without a score: counted in N, never tied or beaten
    file_scores: tuple[float, ...] = ()  # every row in file order (NaN where empty); MLE-bench's medals use it
    ranked: tuple[float, ...] = ()  # every row as MLE-Dojo walks them (see the module docstring)

    def __post_init__(self) -> None:
        if self.direction not in DIRECTIONS:
            raise LeaderboardError(f"direction={self.direction!r}; allowed: {', '.join(DIRECTIONS)}")
        if not self.scores:
            raise LeaderboardError("leaderboard has no entries")
        if not (self.tie_tolerance >= 0 and math.isfinite(self.tie_tolerance)):
            raise LeaderboardError(f"tie_tolerance={self.tie_tolerance!r}; must be a finite number >= 0")

    @classmethod
    def from_scores(cls, scores: list[float], direction: str, tie_tolerance: float = 0.0) -> Leaderboard:
        """A board from a list of scores; missing (None/NaN) ones count in N as empty rows."""
        values = [math.nan if s is None else float(s) for s in scores]
        clean = [v for v in values if not math.isnan(v)]
        best_first = direction == MAXIMIZE
        return cls(tuple(sorted(clean, reverse=best_first)), direction, tie_tolerance, empty=len(values) - len(clean),
                   file_scores=tuple(values), ranked=tuple(sorted(values, reverse=best_first)))

    def __len__(self) -> int:
        return len(self.scores) + self.empty

    def position(self, score: float) -> int:
        for index, entry in enumerate(self.ranked or self.scores, start=1):
            slack = self.tie_tolerance * max(1.0, abs(entry))
            ties_or_beats = score >= entry - slack if self.direction == MAXIMIZE else score <= entry + slack
            if ties_or_beats:
                return index
        return len(self) + 1

    def position_score(self, score: float) -> float:
        if not math.isfinite(score):
            return 0.0
        n = len(self)
        return (n - self.position(score) + 1) / n


def is_lfs_pointer(path: Path) -> bool:
    """True for a Git LFS pointer file (a clone made without git-lfs holds these instead of data)."""
    try:
        with open(path, "rb") as handle:
            return handle.read(len(LFS_POINTER_PREFIX)).decode("ascii", "replace") == LFS_POINTER_PREFIX
    except OSError:
        return False


def read_leaderboard(path: Path, direction: str, tie_tolerance: float = 0.0) -> Leaderboard:
    """Read a leaderboard CSV with a ``score`` column (MLE-bench also has ``scoreNullable``).

    Order in the file does not matter for positions (entries are re-sorted by ``direction``); it is
    kept in ``file_scores`` for MLE-bench's medal thresholds, which read the board as ranked.
    """
    path = Path(path)
    if not path.is_file():
        raise LeaderboardError(f"leaderboard file not found: {path}")
    if is_lfs_pointer(path):
        raise LeaderboardError(
            f"{path}: is a Git LFS pointer, not the leaderboard (the repository was cloned without git-lfs); "
            "run `git lfs install && git lfs pull` in that clone, then retry"
        )
    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:
            rows = list(csv.reader(handle))
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise LeaderboardError(f"{path}: not a readable CSV: {err}") from err
    if not rows:
        raise LeaderboardError(f"{path}: empty file; a leaderboard needs a header with a 'score' column and rows")
    header = [h.strip() for h in rows[0]]
    column = next((c for c in SCORE_COLUMNS if c in header), None)
    if column is None:
        raise LeaderboardError(f"{path}: no 'score' column; columns are {header}")
    index = header.index(column)
    scores: list[float] = []
    for line, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue  # blank line (e.g. a trailing newline), not a team
        text = row[index].strip() if index < len(row) else ""
        if not text:
            scores.append(math.nan)
            continue
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise LeaderboardError(f"{path}, line {line}: {column}={text!r} is not a finite number; fix or delete the row")
        scores.append(value)
    if not any(math.isfinite(s) for s in scores):
        raise LeaderboardError(f"{path}: column '{column}' has no scores (header only, or every row empty); "
                               "copy the full board from the benchmark's repository (MLE-Dojo: "
                               "mledojo/competitions/<comp>/info/; MLE-bench: git lfs pull)")
    return Leaderboard.from_scores(scores, direction, tie_tolerance)
