"""Loaders for the three task layouts found on disk: ``detect_layout`` and ``load_task``.

* ``wmrl`` (this project's own, the built-in pool)::

      <task>/task.json                  name, metric, direction, category, split[, tie_tolerance]
      <task>/public/                    description.md, train/test data, sample_submission.csv
      <task>/private/answers.csv        id + target columns, same schema as the sample submission
      <task>/private/leaderboard.csv    rank,score[,source]
      <task>/reference/                 dev-only reference solutions + index.json

* ``mlebench``: MLE-bench's prepared competitions (see :mod:`wmrl.tasks.mlebench`).
* ``mledojo``: MLE-Dojo's prepared competitions (see :mod:`wmrl.tasks.mledojo`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wmrl.grading.leaderboard import BUILTIN_TIE_TOLERANCE, LeaderboardError, read_leaderboard
from wmrl.grading.rules import BOARDS, GradingRules
from wmrl.tasks.files import (
    SAMPLE_SUBMISSION,
    csv_header,
    metric_and_direction,
    read_mapping,
    require_dir,
    require_file,
    sample_submission_columns,
)
from wmrl.tasks.mlebench import load_mlebench
from wmrl.tasks.mledojo import load_mledojo
from wmrl.tasks.task import CATEGORIES, SPLITS, Task, TaskError

LAYOUTS = ("wmrl", "mlebench", "mledojo")


@dataclass(frozen=True)
class LoadOptions:
    """What a pool needs besides its root (config section ``tasks``)."""

    # Where MLE-bench's config.yaml/leaderboard.csv and MLE-Dojo's utils/ and info/ live when
    # they are not inside each competition directory (their repositories' competitions/ folders).
    competitions_dir: Path | None = None
    # MLE-Dojo's reward: "mean" of the private and public position scores, or "private" only.
    mledojo_boards: str = "mean"

    def __post_init__(self) -> None:
        if self.mledojo_boards not in BOARDS:
            raise TaskError(f"mledojo_boards={self.mledojo_boards!r}; allowed: {', '.join(BOARDS)}")

    @classmethod
    def from_config(cls, tasks: Any) -> LoadOptions:
        """From a ``TasksConfig`` (``cfg.tasks``)."""
        folder = Path(tasks.competitions_dir).expanduser() if tasks.competitions_dir else None
        return cls(competitions_dir=folder, mledojo_boards=tasks.mledojo_boards)

    @classmethod
    def coerce(cls, value: LoadOptions | Path | str | None) -> LoadOptions:
        """Accept the older ``competitions_dir`` argument too."""
        if isinstance(value, LoadOptions):
            return value
        return cls(competitions_dir=Path(value) if value else None)


def detect_layout(path: Path) -> str | None:
    path = Path(path)
    if (path / "task.json").is_file():
        return "wmrl"
    if (path / "prepared" / "public").is_dir():
        return "mlebench"
    if (path / "data" / "public").is_dir():
        return "mledojo"
    return None


def load_task(path: Path, options: LoadOptions | Path | str | None = None) -> Task:
    """Load one task directory of any supported layout; ``TaskError`` names what is wrong."""
    path = Path(path)
    opts = LoadOptions.coerce(options)
    if not path.is_dir():
        raise TaskError(f"task directory not found: {path}")
    layout = detect_layout(path)
    if layout == "wmrl":
        task = load_wmrl(path)
    elif layout == "mlebench":
        task = load_mlebench(path, opts.competitions_dir)
    elif layout == "mledojo":
        task = load_mledojo(path, opts.competitions_dir, opts.mledojo_boards)
    else:
        raise TaskError(
            f"{path}: not a task directory; expected task.json (wmrl), prepared/public/ (MLE-bench) "
            "or data/public/ (MLE-Dojo)"
        )
    check_task(task)
    return task


def check_task(task: Task) -> None:
    """Read the private files once so that a broken task fails at load time, naming the file."""
    require_dir(task.public_dir, "public")
    if task.private_dir.resolve().is_relative_to(task.public_dir.resolve()):
        raise TaskError(f"{task.private_dir}: private directory lies inside the public one; the sandbox would see it")
    require_file(task.answers_path, "answers file")
    header = csv_header(task.answers_path, "answers file")
    missing = [c for c in (task.id_column, *task.target_columns) if c not in header]
    if missing:
        raise TaskError(
            f"{task.answers_path}: answers lack column(s) {missing} required by {task.sample_submission_path} "
            f"(answers have {header}); re-run the benchmark's prepare step or rename the column"
        )
    for path in filter(None, (task.leaderboard_path, task.public_leaderboard_path)):
        try:
            read_leaderboard(path, task.direction, task.rules.tie_tolerance)
        except LeaderboardError as err:
            raise TaskError(str(err)) from err


def load_wmrl(path: Path) -> Task:
    meta_path = path / "task.json"
    meta = read_mapping(meta_path)
    if "metric" not in meta:
        raise TaskError(f"{meta_path}: missing key 'metric'")
    metric, direction = metric_and_direction(meta["metric"], meta.get("direction"), meta_path)
    category = meta.get("category", "other")
    split = meta.get("split", "train")
    if category not in CATEGORIES:
        raise TaskError(f"{meta_path}: category={category!r}; allowed: {', '.join(CATEGORIES)}")
    if split not in SPLITS:
        raise TaskError(f"{meta_path}: split={split!r}; allowed: {', '.join(SPLITS)}")
    try:
        # The built-in pool's boards are rounded to 6 decimals, so near-ties count unless told otherwise.
        rules = GradingRules(tie_tolerance=float(meta.get("tie_tolerance", BUILTIN_TIE_TOLERANCE)))
    except (TypeError, ValueError) as err:
        raise TaskError(f"{meta_path}: tie_tolerance: {err}") from err
    public = require_dir(path / "public", "public")
    private = require_dir(path / "private", "private")
    sample = public / SAMPLE_SUBMISSION
    id_column, targets = sample_submission_columns(sample)
    return Task(
        task_id=str(meta.get("task_id", path.name)),
        name=str(meta.get("name", path.name)),
        layout="wmrl",
        root=path,
        public_dir=public,
        private_dir=private,
        answers_path=private / "answers.csv",
        leaderboard_path=private / "leaderboard.csv",
        metric_name=metric,
        direction=direction,
        id_column=id_column,
        target_columns=targets,
        description_path=require_file(public / "description.md", "description"),
        sample_submission_path=sample,
        category=category,
        split=split,
        reference_dir=path / "reference" if (path / "reference").is_dir() else None,
        rules=rules,
    )
