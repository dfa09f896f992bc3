"""MLE-Dojo competitions as its own prepare step (``prepare/mle.py``) lays them out::

    <comp>/data/public/               what the agent sees: description.txt, sample_submission.csv, data
    <comp>/data/private/              test_answer.csv, private_leaderboard.csv, public_leaderboard.csv
    <comp>/utils/metric.py            the metric class (MLE-Dojo's repository: mledojo/competitions/<comp>/)
    <comp>/info/                      description.txt and both boards, as in the repository

``utils/`` and ``info/`` are looked for in ``<comp>/`` and then in ``<competitions_dir>/<comp>/`` (point
``tasks.competitions_dir`` at MLE-Dojo's ``mledojo/competitions``). The metric and its direction come
from ``utils/metric.py`` (read as text: its class, ``higher_is_better``, ``value`` columns), mapped
to a wmrl metric by ``registry/mledojo.yaml``; ``<comp>/wmrl_task.yaml`` with ``metric:`` maps one
the registry does not know. The reward is MLE-Dojo's: the mean of the private and public position
scores (``tasks.mledojo_boards=private`` for the private board only), exact comparisons.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from wmrl.grading.metrics import MAXIMIZE, METRICS, MINIMIZE
from wmrl.grading.rules import GradingRules
from wmrl.tasks.files import (
    first_existing,
    metric_and_direction,
    overrides,
    prepared_task,
    require_dir,
    require_file,
    sample_submission_columns,
)
from wmrl.tasks.metric_source import MetricSource, read_metric_source
from wmrl.tasks.registry import registry
from wmrl.tasks.task import SPLITS, Task, TaskError

PREPARE_HINT = "MLE-Dojo's prepare step writes it (python prepare/mle.py --competitions {comp}); re-run it"


def _places(path: Path, competitions_dir: Path | None) -> list[Path]:
    return [path] + ([Path(competitions_dir) / path.name] if competitions_dir else [])


def _metric(path: Path, places: list[Path], override: dict[str, Any], override_path: Path) -> tuple[str, str]:
    """(metric, direction) from the competition's own metric.py, never from its description."""
    source_path = first_existing(*(p / "utils" / "metric.py" for p in places))
    allowed = ", ".join(sorted(METRICS))
    if source_path is None:
        if override.get("metric"):
            return metric_and_direction(override["metric"], override.get("direction"), override_path)
        raise TaskError(
            f"no MLE-Dojo metric definition for {path.name}: looked for utils/metric.py in "
            f"{', '.join(str(p) for p in places)}; set tasks.competitions_dir to MLE-Dojo's mledojo/competitions, "
            f"or write {override_path} with 'metric: NAME' and 'direction: max|min' (metrics: {allowed})"
        )
    source = read_metric_source(source_path)
    direction = MAXIMIZE if source.higher_is_better else MINIMIZE
    if override.get("metric"):
        return metric_and_direction(override["metric"], direction, override_path)
    entry = registry("mledojo").get(path.name)
    if entry is None or entry.get("class") != source.class_name:
        raise TaskError(
            f"{source_path}: unknown metric: class {source.class_name} (higher_is_better={source.higher_is_better}) "
            f"is not one wmrl knows; read its evaluate() and, if a wmrl metric computes the same number, write "
            f"{override_path} with 'metric: NAME' (metrics: {allowed})"
        )
    if entry.get("evaluate") != source.evaluate_fingerprint:
        raise TaskError(
            f"{source_path}: {source.class_name}.evaluate() differs from the version wmrl mapped to {entry['metric']}; "
            f"check it and confirm with 'metric: {entry['metric']}' in {override_path}"
        )
    return metric_and_direction(entry["metric"], direction, source_path)


def _targets(source: MetricSource | None, sample: Path, sample_targets: tuple[str, ...]) -> tuple[str, ...]:
    if source is None or not source.value_columns:
        return sample_targets
    missing = [c for c in source.value_columns if c not in sample_targets]
    if missing:
        raise TaskError(f"{sample}: lacks column(s) {missing} that {source.path} grades; "
                        "re-run MLE-Dojo's prepare step or fix the sample submission")
    return source.value_columns


def load_mledojo(path: Path, competitions_dir: Path | None = None, boards: str = "mean") -> Task:
    places = _places(path, competitions_dir)
    hint = PREPARE_HINT.format(comp=path.name)
    public = require_dir(path / "data" / "public", "MLE-Dojo public", hint)
    private = require_dir(path / "data" / "private", "MLE-Dojo private", hint)
    answers = require_file(private / "test_answer.csv", "MLE-Dojo answers file", hint)
    info = [p / "info" for p in places]
    leaderboard = first_existing(private / "private_leaderboard.csv", *(i / "private_leaderboard.csv" for i in info))
    if leaderboard is None:
        raise TaskError(f"missing MLE-Dojo leaderboard: {private / 'private_leaderboard.csv'} (also looked in "
                        f"{', '.join(str(i) for i in info)}); copy it from MLE-Dojo's "
                        f"mledojo/competitions/{path.name}/info/ or re-run its prepare step")
    public_board = first_existing(private / "public_leaderboard.csv", *(i / "public_leaderboard.csv" for i in info))
    description = first_existing(public / "description.txt", *(i / "description.txt" for i in info))
    if description is None:
        raise TaskError(f"missing MLE-Dojo description: {public / 'description.txt'}; {hint}")
    override_path = path / "wmrl_task.yaml"
    override = overrides(override_path)
    metric, direction = _metric(path, places, override, override_path)
    sample = public / "sample_submission.csv"
    id_column, sample_targets = sample_submission_columns(sample, hint)
    source_path = first_existing(*(p / "utils" / "metric.py" for p in places))
    targets = _targets(read_metric_source(source_path) if source_path else None, sample, sample_targets)
    return prepared_task("mledojo", path, path.name, str(override.get("name", path.name)), public=public,
                         private=private, answers=answers, leaderboard=leaderboard, description=description,
                         metric=metric, direction=direction, columns=(id_column, targets),
                         category=override.get("category"), public_leaderboard_path=public_board,
                         split=override.get("split", "train") if override.get("split") in SPLITS else "train",
                         rules=GradingRules(tie_tolerance=0.0, boards=boards))
