"""MLE-bench competitions as its prepare step (``mlebench prepare``) lays them out::

    <data>/<id>/prepared/public/      what the agent sees (sample_submission.csv, data)
    <data>/<id>/prepared/private/     answers (the file config.yaml's dataset.answers names)
    <id>/config.yaml                  grader.name; MLE-bench keeps it in its repository
    <id>/leaderboard.csv              the Kaggle board, best first (a Git LFS file in the repository)
    <id>/description.md

``config.yaml``, ``leaderboard.csv`` and ``description.md`` are looked for in ``<data>/<id>/`` and then in
``<competitions_dir>/<id>/`` (point ``tasks.competitions_dir`` at MLE-bench's ``mlebench/competitions``).
The metric comes from ``registry/mlebench.yaml`` (keyed by competition; grader names can mislead),
else ``<id>/wmrl_task.yaml``'s ``metric:``, else the grader name for a competition MLE-bench does not
ship. Grading follows MLE-bench: the score rounded to 5 decimals, exact comparisons, log-loss rows
that must sum to one, medal and above-median flags from the board's thresholds.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from wmrl.grading.leaderboard import LeaderboardError, read_leaderboard
from wmrl.grading.metrics import METRICS, canonical_name
from wmrl.grading.rules import GradingRules
from wmrl.tasks.files import (
    first_existing,
    metric_and_direction,
    overrides,
    prepared_task,
    read_mapping,
    require_dir,
    sample_submission_columns,
)
from wmrl.tasks.registry import registry
from wmrl.tasks.task import Task, TaskError

ROUND_DIGITS = 5  # MLE-bench's Grader rounds every score to 5 decimals
PREPARE_HINT = "MLE-bench's prepare step writes it (mlebench prepare -c {comp}); re-run it"


def _metric(comp: str, config: dict[str, Any], config_path: Path, override: dict[str, Any],
            override_path: Path) -> tuple[str, float | None]:
    """(wmrl metric, probability-sum tolerance) for competition ``comp``."""
    allowed = ", ".join(sorted(METRICS))
    if override.get("metric"):
        return str(override["metric"]), override.get("probability_sum_atol")
    entry = registry("mlebench").get(comp)
    if entry is not None and "metric" in entry:
        return entry["metric"], entry.get("probability_sum_atol")
    if entry is not None:
        raise TaskError(f"{config_path}: unknown metric: wmrl cannot grade {comp} ({entry['unsupported']}); "
                        f"if a wmrl metric computes the same number, write {override_path} with 'metric: NAME' "
                        f"(metrics: {allowed})")
    grader = config.get("grader")
    if not isinstance(grader, dict) or "name" not in grader:
        raise TaskError(f"{config_path}: missing 'grader.name' (the metric of the competition)")
    name = canonical_name(str(grader["name"]))
    if name is None:
        raise TaskError(f"{config_path}: unknown metric: grader.name={grader['name']!r} is not one wmrl knows; "
                        f"write {override_path} with 'metric: NAME' (metrics: {allowed})")
    # MLE-bench grades log losses with scikit-learn after refusing rows that do not sum to one.
    return ("log_loss_sklearn", 1e-6) if name == "log_loss" else (name, None)


def _check_board_order(leaderboard: Path, direction: str) -> None:
    """MLE-bench reads the direction from the board (first row vs last); it must agree with the metric's."""
    try:
        ranked = [s for s in read_leaderboard(leaderboard, direction).file_scores if not math.isnan(s)]
    except LeaderboardError as err:
        raise TaskError(str(err)) from err
    if len(ranked) > 1 and ranked[0] != ranked[-1] and (ranked[0] > ranked[-1]) != (direction == "max"):
        raise TaskError(f"{leaderboard}: the board is ranked {'lower' if ranked[0] < ranked[-1] else 'higher'}-is-"
                        f"better but the metric is {'higher' if direction == 'max' else 'lower'}-is-better")


def load_mlebench(path: Path, competitions_dir: Path | None = None) -> Task:
    places = [path] + ([Path(competitions_dir) / path.name] if competitions_dir else [])
    config_path = first_existing(*(p / "config.yaml" for p in places))
    if config_path is None:
        raise TaskError(f"missing MLE-bench config.yaml: looked in {', '.join(str(p) for p in places)}; set "
                        "tasks.competitions_dir to MLE-bench's mlebench/competitions")
    config = read_mapping(config_path)
    comp = str(config.get("id", path.name))
    override_path = path / "wmrl_task.yaml"
    override = overrides(override_path)
    metric_name, sum_atol = _metric(comp, config, config_path, override, override_path)
    metric, direction = metric_and_direction(metric_name, override.get("direction"), override_path
                                             if override.get("metric") else config_path)
    leaderboard = first_existing(*(p / "leaderboard.csv" for p in places))
    if leaderboard is None:
        raise TaskError(f"missing MLE-bench leaderboard.csv: looked in {', '.join(str(p) for p in places)}; set "
                        "tasks.competitions_dir to MLE-bench's mlebench/competitions")
    _check_board_order(leaderboard, direction)
    hint = PREPARE_HINT.format(comp=comp)
    public = require_dir(path / "prepared" / "public", "MLE-bench public", hint)
    private = require_dir(path / "prepared" / "private", "MLE-bench private", hint)
    answers = _answers(config, config_path, path, private)
    sample = public / "sample_submission.csv"
    id_column, targets = sample_submission_columns(sample, hint)
    description = first_existing(public / "description.md", *(p / "description.md" for p in places))
    return prepared_task("mlebench", path, comp, str(config.get("name", path.name)), public=public, private=private,
                         answers=answers, leaderboard=leaderboard, description=description, metric=metric,
                         direction=direction, columns=(id_column, targets), category=config.get("category"),
                         rules=GradingRules(round_digits=ROUND_DIGITS, probability_sum_atol=sum_atol, medals=True))


def _answers(config: dict[str, Any], config_path: Path, path: Path, private: Path) -> Path:
    named = (config.get("dataset") or {}).get("answers") if isinstance(config.get("dataset"), dict) else None
    if named:
        # MLE-bench writes it relative to the data root: "<id>/prepared/private/test.csv".
        for candidate in (path.parent / named, path / named, private / Path(named).name):
            if candidate.is_file():
                return candidate
        raise TaskError(f"missing MLE-bench answers file: {private / Path(named).name} ({config_path} names "
                        f"dataset.answers={named!r}); {PREPARE_HINT.format(comp=path.name)}")
    csvs = sorted(private.glob("*.csv"))
    if len(csvs) != 1:
        raise TaskError(f"{config_path}: no dataset.answers and {private} holds {len(csvs)} CSV files (need exactly 1)")
    return csvs[0]
