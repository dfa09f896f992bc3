"""Tiny real task directories in all three layouts, for tests (here and in other parts' tests).

The task: binary labels ``y`` for ten test ids; answers are ``y = 1`` for even ids. Metric accuracy
unless told otherwise; the leaderboard holds ``scores`` (best first for the metric's direction).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

TEST_IDS = list(range(100, 110))
ANSWERS = [1 if i % 2 == 0 else 0 for i in TEST_IDS]


def _public(public: Path) -> None:
    public.mkdir(parents=True, exist_ok=True)
    train = pd.DataFrame({"id": range(20), "x": [float(i) for i in range(20)], "y": [i % 2 == 0 for i in range(20)]})
    train["y"] = train["y"].astype(int)
    train.to_csv(public / "train.csv", index=False)
    pd.DataFrame({"id": TEST_IDS, "x": [float(i) for i in TEST_IDS]}).to_csv(public / "test.csv", index=False)
    pd.DataFrame({"id": TEST_IDS, "y": [0] * len(TEST_IDS)}).to_csv(public / "sample_submission.csv", index=False)


def _answers(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"id": TEST_IDS, "y": ANSWERS}).to_csv(path, index=False)


DESCRIPTION = "# Tiny Parity\n\nPredict whether the id is even.\n\n## Evaluation\n\nSubmissions are scored by accuracy.\n"


def make_wmrl_task(root: Path, scores: tuple[float, ...] = (1.0, 0.9, 0.7, 0.5, 0.3), metric: str = "accuracy",
                   name: str = "tiny-parity", split: str = "train") -> Path:
    task = Path(root) / name
    _public(task / "public")
    (task / "public" / "description.md").write_text(DESCRIPTION)
    _answers(task / "private" / "answers.csv")
    pd.DataFrame({"rank": range(1, len(scores) + 1), "score": scores}).to_csv(task / "private" / "leaderboard.csv", index=False)
    (task / "task.json").write_text(json.dumps({"task_id": name, "name": "Tiny Parity", "metric": metric,
                                                "category": "tabular", "split": split}))
    return task


def make_mlebench_task(root: Path, scores: tuple[float, ...] = (1.0, 0.9, 0.7, 0.5, 0.3), grader: str = "accuracy",
                       name: str = "tiny-parity") -> Path:
    task = Path(root) / name
    _public(task / "prepared" / "public")
    (task / "prepared" / "public" / "description.md").write_text(DESCRIPTION)
    _answers(task / "prepared" / "private" / "test.csv")
    # MLE-bench's leaderboard.csv: one row per team, best first, column "score".
    pd.DataFrame({"scoreNullable": scores, "teamId": range(len(scores)), "score": scores}).to_csv(
        task / "leaderboard.csv", index=False)
    (task / "config.yaml").write_text(
        f"id: {name}\nname: Tiny Parity\ncompetition_type: simple\n"
        f"dataset:\n  answers: {name}/prepared/private/test.csv\n  sample_submission: {name}/prepared/public/sample_submission.csv\n"
        f"grader:\n  name: {grader}\n  grade_fn: mlebench.competitions.{name}.grade:grade\n"
    )
    return task


METRIC_STUB = """from mledojo.metrics.base import CompetitionMetrics


class {cls}(CompetitionMetrics):
    \"\"\"Stand-in written by wmrl's tests: the class name and defaults of an MLE-Dojo metric.py, not its code.\"\"\"

    def __init__(self, value: str = "{value}", higher_is_better: bool = {higher}):
        super().__init__(higher_is_better)
        self.value = value

    def evaluate(self, y_true, y_pred):
        raise NotImplementedError("wmrl reads this file, never runs it")
"""


def write_metric_stub(path: Path, class_name: str, value: str, higher_is_better: bool) -> Path:
    """An MLE-Dojo ``utils/metric.py`` with the given class name and ``__init__`` defaults."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(METRIC_STUB.format(cls=class_name, value=value, higher=higher_is_better))
    return path


def make_mledojo_task(root: Path, scores: tuple[float, ...] = (1.0, 0.9, 0.7, 0.5, 0.3), name: str = "tiny-parity",
                      public_scores: tuple[float, ...] | None = None, metric: str | None = "accuracy",
                      higher_is_better: bool = True) -> Path:
    """MLE-Dojo's layout as ``prepare/mle.py`` writes it, plus ``utils/metric.py`` as in its repository.

    The stub metric class is not in wmrl's registry, so ``metric`` (if given) is confirmed in
    ``wmrl_task.yaml``, the documented way to grade a competition wmrl does not know.
    """
    task = Path(root) / name
    public, private = task / "data" / "public", task / "data" / "private"
    _public(public)
    (public / "description.txt").write_text(DESCRIPTION)
    _answers(private / "test_answer.csv")
    for board, values in (("private", scores), ("public", public_scores)):
        if values is not None:
            pd.DataFrame({"rank": range(1, len(values) + 1), "score": values}).to_csv(
                private / f"{board}_leaderboard.csv", index=False)
    write_metric_stub(task / "utils" / "metric.py", "TinyParityMetrics", "y", higher_is_better)
    if metric is not None:
        (task / "wmrl_task.yaml").write_text(f"metric: {metric}\n")
    return task
