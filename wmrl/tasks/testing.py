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


def make_mledojo_task(root: Path, scores: tuple[float, ...] = (1.0, 0.9, 0.7, 0.5, 0.3), name: str = "tiny-parity",
                      description: str = DESCRIPTION) -> Path:
    task = Path(root) / name
    _public(task / "data" / "public")
    (task / "data" / "public" / "description.txt").write_text(description)
    _answers(task / "data" / "private" / "test_answer.csv")
    pd.DataFrame({"rank": range(1, len(scores) + 1), "score": scores}).to_csv(task / "private_leaderboard.csv", index=False)
    return task
