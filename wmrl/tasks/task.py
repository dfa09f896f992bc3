"""A task: a public side the sandbox sees, a private side only the grader reads.

``public_dir`` holds the description, training data, test inputs and ``sample_submission.csv``; it
is the only directory bound into the sandbox. Answers, leaderboard, metric and direction live
elsewhere (``private_dir`` and the task's metadata), never below ``public_dir``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import pandas as pd

from wmrl.grading.leaderboard import Leaderboard, LeaderboardError, read_leaderboard
from wmrl.grading.metrics import Metric, get_metric
from wmrl.grading.rules import GradingRules

CATEGORIES = ("tabular", "image", "text", "other")
SPLITS = ("train", "heldout")


class TaskError(ValueError):
    """A task directory is missing a file or has a malformed one; the message names the file."""


@dataclass(frozen=True)
class ReferenceSolution:
    """A trusted solution stored with a task (dev-only; never shown to the agent)."""

    name: str
    path: Path
    raw_score: float
    position_score: float
    weak: bool  # deliberately weak (dummy model, tiny training fraction, useless features)
    note: str = ""

    @property
    def code(self) -> str:
        return self.path.read_text(encoding="utf-8")


@dataclass(frozen=True)
class Task:
    task_id: str
    name: str
    layout: str  # "wmrl", "mlebench" or "mledojo"
    root: Path
    public_dir: Path
    private_dir: Path
    answers_path: Path
    leaderboard_path: Path
    metric_name: str
    direction: str
    id_column: str
    target_columns: tuple[str, ...]
    description_path: Path | None
    sample_submission_path: Path
    category: str = "other"
    split: str = "train"
    reference_dir: Path | None = None
    public_leaderboard_path: Path | None = None  # MLE-Dojo's second board
    rules: GradingRules = field(default_factory=GradingRules)

    @property
    def metric(self) -> Metric:
        return get_metric(self.metric_name)

    def _read_board(self, path: Path) -> Leaderboard:
        try:
            return read_leaderboard(path, self.direction, self.rules.tie_tolerance)
        except LeaderboardError as err:
            raise TaskError(f"task {self.task_id}: {err}") from err

    @cached_property
    def leaderboard(self) -> Leaderboard:
        """The private board: positions, medals and ``wmrl tasks show`` use it."""
        return self._read_board(self.leaderboard_path)

    @cached_property
    def public_leaderboard(self) -> Leaderboard | None:
        return self._read_board(self.public_leaderboard_path) if self.public_leaderboard_path else None

    def leaderboards(self) -> dict[str, Leaderboard]:
        """The boards the reward averages: the private one, plus the public one under ``boards: mean``."""
        boards = {"private": self.leaderboard}
        if self.rules.boards == "mean" and self.public_leaderboard is not None:
            boards["public"] = self.public_leaderboard
        return boards

    def answers(self) -> pd.DataFrame:
        try:
            frame = pd.read_csv(self.answers_path, dtype={self.id_column: str})
        except Exception as err:
            raise TaskError(f"{self.answers_path}: answers are not a readable CSV: {err}") from err
        missing = [c for c in (self.id_column, *self.target_columns) if c not in frame.columns]
        if missing:
            raise TaskError(
                f"{self.answers_path}: missing column(s) {missing} named by {self.sample_submission_path.name}"
            )
        return frame

    def description(self) -> str:
        if self.description_path is None or not self.description_path.is_file():
            return ""
        return self.description_path.read_text(encoding="utf-8", errors="replace")

    def reference_solutions(self) -> list[ReferenceSolution]:
        """Stored reference solutions, weakest first (empty for pools without them)."""
        if self.reference_dir is None:
            return []
        index_path = self.reference_dir / "index.json"
        if not index_path.is_file():
            return []
        try:
            entries = json.loads(index_path.read_text(encoding="utf-8"))["solutions"]
            refs = [
                ReferenceSolution(
                    name=e["name"],
                    path=self.reference_dir / e["file"],
                    raw_score=float(e["raw_score"]),
                    position_score=float(e["position_score"]),
                    weak=bool(e.get("weak", False)),
                    note=e.get("note", ""),
                )
                for e in entries
            ]
        except (KeyError, TypeError, ValueError) as err:
            raise TaskError(f"{index_path}: malformed reference index: {err!r}") from err
        return sorted(refs, key=lambda r: (r.position_score, r.name))
