"""Small readers shared by the layout loaders; every error names the file and what to do."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import yaml

from wmrl.grading.metrics import DIRECTIONS, get_metric
from wmrl.tasks.task import CATEGORIES, Task, TaskError

SAMPLE_SUBMISSION = "sample_submission.csv"


def require_file(path: Path, what: str, hint: str = "") -> Path:
    if not path.is_file():
        raise TaskError(f"missing {what}: {path}" + (f"; {hint}" if hint else ""))
    return path


def require_dir(path: Path, what: str, hint: str = "") -> Path:
    if not path.is_dir():
        raise TaskError(f"missing {what} directory: {path}" + (f"; {hint}" if hint else ""))
    return path


def first_existing(*paths: Path) -> Path | None:
    return next((p for p in paths if p.is_file()), None)


def csv_header(path: Path, what: str) -> list[str]:
    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:
            return [h.strip() for h in next(csv.reader(handle), [])]
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise TaskError(f"{path}: unreadable {what}: {err}") from err


def sample_submission_columns(path: Path, hint: str = "") -> tuple[str, tuple[str, ...]]:
    """``(id_column, target_columns)`` from the sample submission's header: id first, then targets."""
    require_file(path, "sample submission", hint)
    header = csv_header(path, "sample submission")
    if len(header) < 2 or any(not h for h in header):
        raise TaskError(f"{path}: sample submission needs an id column and at least one target column; got {header}")
    return header[0], tuple(header[1:])


def read_mapping(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError) as err:
        raise TaskError(f"{path}: malformed file: {err}") from err
    if not isinstance(data, dict):
        raise TaskError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def metric_and_direction(metric: Any, direction: Any, where: Path) -> tuple[str, str]:
    try:
        resolved = get_metric(str(metric), where=str(where))
    except ValueError as err:
        raise TaskError(str(err)) from err
    direction = direction or resolved.direction
    if direction not in DIRECTIONS:
        raise TaskError(f"{where}: direction={direction!r}; allowed: {', '.join(DIRECTIONS)}")
    if direction != resolved.direction:
        raise TaskError(f"{where}: metric {resolved.name} is {'higher' if resolved.direction == 'max' else 'lower'}"
                        f"-is-better but the file says direction={direction}; fix whichever is wrong")
    return resolved.name, str(direction)


def overrides(path: Path) -> dict[str, Any]:
    """``<task>/wmrl_task.yaml``: optional user overrides (metric, name, category, split) for foreign layouts."""
    return read_mapping(path) if path.is_file() else {}


def prepared_task(layout: str, root: Path, task_id: str, name: str, *, public: Path, private: Path, answers: Path,
                  leaderboard: Path, description: Path | None, metric: str, direction: str,
                  columns: tuple[str, tuple[str, ...]], category: Any, **extra: Any) -> Task:
    """A task of an external benchmark's prepared layout (MLE-bench, MLE-Dojo): the sample submission is
    ``public/sample_submission.csv``, ``columns`` its (id column, target columns), and a category wmrl
    does not know is ``other``; ``extra``: the layout's own Task fields (rules, split, second board)."""
    return Task(task_id=task_id, name=name, layout=layout, root=root, public_dir=public, private_dir=private,
                answers_path=answers, leaderboard_path=leaderboard, metric_name=metric, direction=direction,
                id_column=columns[0], target_columns=columns[1], description_path=description,
                sample_submission_path=public / "sample_submission.csv",
                category=str(category) if category in CATEGORIES else "other", **extra)
