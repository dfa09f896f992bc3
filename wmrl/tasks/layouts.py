"""Loaders for the three task layouts found on disk.

* ``wmrl`` (this project's own, the built-in pool)::

      <task>/task.json                  name, metric, direction, category, split
      <task>/public/                    description.md, train/test data, sample_submission.csv
      <task>/private/answers.csv        id + target columns, same schema as the sample submission
      <task>/private/leaderboard.csv    rank,score[,source]
      <task>/reference/                 dev-only reference solutions + index.json

* ``mlebench`` (MLE-bench prepared competitions)::

      <id>/prepared/public/             what the agent sees
      <id>/prepared/private/            answers (path named by config.yaml's dataset.answers)
      <id>/config.yaml                  grader.name names the metric
      <id>/leaderboard.csv              score (or scoreNullable) column

  ``config.yaml``/``leaderboard.csv`` may instead sit in ``<competitions_dir>/<id>/`` (MLE-bench keeps
  them in its repository, not in the data cache).

* ``mledojo``::

      <comp>/data/public/               what the agent sees
      <comp>/data/private/test_answer.csv
      <comp>/private_leaderboard.csv    rank,score (also found in <comp>/info/)
      <comp>/wmrl_task.yaml             optional: metric, direction (else read from the description)
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

import yaml

from wmrl.grading.leaderboard import LeaderboardError, read_leaderboard
from wmrl.grading.metrics import DIRECTIONS, get_metric
from wmrl.tasks.task import CATEGORIES, SPLITS, Task, TaskError

LAYOUTS = ("wmrl", "mlebench", "mledojo")
SAMPLE_SUBMISSION = "sample_submission.csv"


def detect_layout(path: Path) -> str | None:
    path = Path(path)
    if (path / "task.json").is_file():
        return "wmrl"
    if (path / "prepared" / "public").is_dir():
        return "mlebench"
    if (path / "data" / "public").is_dir():
        return "mledojo"
    return None


def load_task(path: Path, competitions_dir: Path | None = None) -> Task:
    """Load one task directory of any supported layout; ``TaskError`` names what is wrong."""
    path = Path(path)
    if not path.is_dir():
        raise TaskError(f"task directory not found: {path}")
    layout = detect_layout(path)
    if layout == "wmrl":
        task = load_wmrl(path)
    elif layout == "mlebench":
        task = load_mlebench(path, competitions_dir)
    elif layout == "mledojo":
        task = load_mledojo(path)
    else:
        raise TaskError(
            f"{path}: not a task directory; expected task.json (wmrl), prepared/public/ (MLE-bench) "
            "or data/public/ (MLE-Dojo)"
        )
    check_task(task)
    return task


# --------------------------------------------------------------------------- shared checks


def _require_file(path: Path, what: str) -> Path:
    if not path.is_file():
        raise TaskError(f"missing {what}: {path}")
    return path


def _require_dir(path: Path, what: str) -> Path:
    if not path.is_dir():
        raise TaskError(f"missing {what} directory: {path}")
    return path


def sample_submission_columns(path: Path) -> tuple[str, tuple[str, ...]]:
    """``(id_column, target_columns)`` from the sample submission's header: id first, then targets."""
    _require_file(path, "sample submission")
    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:
            header = next(csv.reader(handle), [])
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise TaskError(f"{path}: unreadable sample submission: {err}") from err
    header = [h.strip() for h in header]
    if len(header) < 2 or any(not h for h in header):
        raise TaskError(f"{path}: sample submission needs an id column and at least one target column; got {header}")
    return header[0], tuple(header[1:])


def check_task(task: Task) -> None:
    """Read the private files once so that a broken task fails at load time, naming the file."""
    _require_dir(task.public_dir, "public")
    if task.private_dir.resolve().is_relative_to(task.public_dir.resolve()):
        raise TaskError(f"{task.private_dir}: private directory lies inside the public one; the sandbox would see it")
    _require_file(task.answers_path, "answers file")
    try:
        with task.answers_path.open(encoding="utf-8-sig", newline="") as handle:
            header = [h.strip() for h in next(csv.reader(handle), [])]
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise TaskError(f"{task.answers_path}: unreadable answers file: {err}") from err
    missing = [c for c in (task.id_column, *task.target_columns) if c not in header]
    if missing:
        raise TaskError(
            f"{task.answers_path}: answers lack column(s) {missing} required by {task.sample_submission_path}"
        )
    try:
        read_leaderboard(task.leaderboard_path, task.direction)
    except LeaderboardError as err:
        raise TaskError(str(err)) from err


def _read_mapping(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError) as err:
        raise TaskError(f"{path}: malformed file: {err}") from err
    if not isinstance(data, dict):
        raise TaskError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def _metric_and_direction(metric: Any, direction: Any, where: Path) -> tuple[str, str]:
    try:
        resolved = get_metric(str(metric), where=str(where))
    except ValueError as err:
        raise TaskError(str(err)) from err
    direction = direction or resolved.direction
    if direction not in DIRECTIONS:
        raise TaskError(f"{where}: direction={direction!r}; allowed: {', '.join(DIRECTIONS)}")
    return resolved.name, str(direction)


def _first_existing(*paths: Path) -> Path | None:
    return next((p for p in paths if p.is_file()), None)


# --------------------------------------------------------------------------- wmrl


def load_wmrl(path: Path) -> Task:
    meta_path = path / "task.json"
    meta = _read_mapping(meta_path)
    for key in ("metric",):
        if key not in meta:
            raise TaskError(f"{meta_path}: missing key '{key}'")
    metric, direction = _metric_and_direction(meta["metric"], meta.get("direction"), meta_path)
    category = meta.get("category", "other")
    split = meta.get("split", "train")
    if category not in CATEGORIES:
        raise TaskError(f"{meta_path}: category={category!r}; allowed: {', '.join(CATEGORIES)}")
    if split not in SPLITS:
        raise TaskError(f"{meta_path}: split={split!r}; allowed: {', '.join(SPLITS)}")
    public = _require_dir(path / "public", "public")
    private = _require_dir(path / "private", "private")
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
        description_path=_require_file(public / "description.md", "description"),
        sample_submission_path=sample,
        category=category,
        split=split,
        reference_dir=path / "reference" if (path / "reference").is_dir() else None,
    )


# --------------------------------------------------------------------------- MLE-bench


def load_mlebench(path: Path, competitions_dir: Path | None = None) -> Task:
    places = [path] + ([Path(competitions_dir) / path.name] if competitions_dir else [])
    config_path = _first_existing(*(p / "config.yaml" for p in places))
    if config_path is None:
        raise TaskError(f"missing MLE-bench config.yaml: looked in {', '.join(str(p) for p in places)}")
    config = _read_mapping(config_path)
    grader = config.get("grader")
    if not isinstance(grader, dict) or "name" not in grader:
        raise TaskError(f"{config_path}: missing 'grader.name' (the metric of the competition)")
    metric, direction = _metric_and_direction(grader["name"], grader.get("direction"), config_path)
    leaderboard = _first_existing(*(p / "leaderboard.csv" for p in places))
    if leaderboard is None:
        raise TaskError(f"missing MLE-bench leaderboard.csv: looked in {', '.join(str(p) for p in places)}")
    public = path / "prepared" / "public"
    private = _require_dir(path / "prepared" / "private", "MLE-bench private")
    answers = _mlebench_answers(config, config_path, path, private)
    sample = public / SAMPLE_SUBMISSION
    id_column, targets = sample_submission_columns(sample)
    description = _first_existing(public / "description.md", path / "description.md", config_path.parent / "description.md")
    return Task(
        task_id=str(config.get("id", path.name)),
        name=str(config.get("name", path.name)),
        layout="mlebench",
        root=path,
        public_dir=public,
        private_dir=private,
        answers_path=answers,
        leaderboard_path=leaderboard,
        metric_name=metric,
        direction=direction,
        id_column=id_column,
        target_columns=targets,
        description_path=description,
        sample_submission_path=sample,
        category=str(config.get("category", "other")) if config.get("category") in CATEGORIES else "other",
    )


def _mlebench_answers(config: dict[str, Any], config_path: Path, path: Path, private: Path) -> Path:
    named = (config.get("dataset") or {}).get("answers") if isinstance(config.get("dataset"), dict) else None
    if named:
        # MLE-bench writes it relative to the data root: "<id>/prepared/private/test.csv".
        for candidate in (path.parent / named, path / named, private / Path(named).name):
            if candidate.is_file():
                return candidate
        raise TaskError(f"{config_path}: dataset.answers names {named!r}, which does not exist under {path}")
    csvs = sorted(private.glob("*.csv"))
    if len(csvs) != 1:
        raise TaskError(f"{config_path}: no dataset.answers and {private} holds {len(csvs)} CSV files (need exactly 1)")
    return csvs[0]


# --------------------------------------------------------------------------- MLE-Dojo

# Checked in this order: the first match in the description's evaluation section wins.
_METRIC_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"log[\s_-]?loss|logarithmic loss|cross[\s-]?entropy", "log_loss"),
    (r"\broc\b|\bauc\b|area under the", "roc_auc"),
    (r"rmsle|root mean squared? log", "rmsle"),
    (r"rmse|root mean squared? error", "rmse"),
    (r"\bmae\b|mean absolute error", "mae"),
    (r"\bf1\b|f1[\s-]score", "macro_f1"),
    (r"accuracy", "accuracy"),
    (r"\br2\b|r-squared|coefficient of determination", "r2"),
)


def metric_from_description(text: str) -> str | None:
    lowered = text.lower()
    match = re.search(r"evaluation|metric|scored", lowered)
    for section in ((lowered[match.start():] if match else ""), lowered):
        for pattern, name in _METRIC_PATTERNS:
            if section and re.search(pattern, section):
                return name
    return None


def _direction_from_ranks(leaderboard: Path) -> str | None:
    try:
        with leaderboard.open(encoding="utf-8-sig", newline="") as handle:
            rows = [r for r in csv.DictReader(handle) if r.get("rank") and r.get("score")]
        rows.sort(key=lambda r: float(r["rank"]))
        first, last = float(rows[0]["score"]), float(rows[-1]["score"])
    except (OSError, ValueError, IndexError, KeyError, UnicodeDecodeError, csv.Error):
        return None
    if first == last:
        return None
    return "max" if first > last else "min"


def load_mledojo(path: Path) -> Task:
    public = path / "data" / "public"
    private = _require_dir(path / "data" / "private", "MLE-Dojo private")
    answers = _require_file(private / "test_answer.csv", "MLE-Dojo answers file")
    leaderboard = _first_existing(path / "private_leaderboard.csv", path / "info" / "private_leaderboard.csv")
    if leaderboard is None:
        raise TaskError(f"missing MLE-Dojo leaderboard: {path / 'private_leaderboard.csv'} (or info/private_leaderboard.csv)")
    description = _first_existing(
        public / "description.md", public / "description.txt", path / "info" / "description.txt", path / "description.md"
    )
    override_path = path / "wmrl_task.yaml"
    override = _read_mapping(override_path) if override_path.is_file() else {}
    metric_name = override.get("metric")
    where = override_path
    if metric_name is None:
        where = description or public / "description.md"
        text = description.read_text(encoding="utf-8", errors="replace") if description else ""
        metric_name = metric_from_description(text)
        if metric_name is None:
            raise TaskError(
                f"{where}: cannot tell the metric from the description; write {override_path} with 'metric:' "
                "(and optionally 'direction: max|min')"
            )
    direction = override.get("direction") or _direction_from_ranks(leaderboard)
    metric, direction = _metric_and_direction(metric_name, direction, where)
    sample = public / SAMPLE_SUBMISSION
    id_column, targets = sample_submission_columns(sample)
    return Task(
        task_id=path.name,
        name=str(override.get("name", path.name)),
        layout="mledojo",
        root=path,
        public_dir=public,
        private_dir=private,
        answers_path=answers,
        leaderboard_path=leaderboard,
        metric_name=metric,
        direction=direction,
        id_column=id_column,
        target_columns=targets,
        description_path=description,
        sample_submission_path=sample,
        category=override.get("category", "other") if override.get("category") in CATEGORIES else "other",
        split=override.get("split", "train") if override.get("split") in SPLITS else "train",
    )
