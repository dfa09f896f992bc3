"""Grade a submission against a task's hidden answers: validate, score, place on the leaderboard.

Runs outside the sandbox and never raises for anything the submission contains: an invalid or
missing submission, or any failure while scoring it, gives ``Grade(valid=False, position_score=0)``
with the reason.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from wmrl.grading.validate import DEFAULT_MAX_BYTES, answers_matrix, validate_submission


@dataclass
class Grade:
    valid: bool
    raw_score: float | None
    position: int | None
    leaderboard_size: int
    position_score: float  # in [0, 1]; 0 when invalid
    metric: str
    direction: str
    reason: str = ""  # why the submission is invalid (empty when valid)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Grade:
        return cls(**data)


def grade_submission(task: Any, submission_path: Path | str | None, max_bytes: int = DEFAULT_MAX_BYTES) -> Grade:
    """Grade ``submission_path`` for ``task`` (a :class:`wmrl.tasks.task.Task`)."""
    start = time.perf_counter()
    leaderboard = task.leaderboard  # task errors (broken private side) are infrastructure errors: raise
    answers = task.answers()

    def invalid(reason: str) -> Grade:
        return Grade(False, None, None, len(leaderboard), 0.0, task.metric_name, task.direction, reason,
                     time.perf_counter() - start)

    if submission_path is None:
        return invalid("no submission file was written at SUBMISSION_PATH")
    metric = task.metric
    try:
        check = validate_submission(Path(submission_path), answers, task.id_column, task.target_columns, metric, max_bytes)
        if not check.valid:
            return invalid(check.reason)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            raw = metric(answers_matrix(answers, task.target_columns, metric), check.y_pred)
    except Exception as err:  # noqa: BLE001 - e.g. a label column a metric cannot score; the submission's fault
        return invalid(f"submission could not be scored with {metric.name}: {type(err).__name__}: {err}")
    if not math.isfinite(raw):
        return invalid(f"{metric.name} of the submission is not finite ({raw})")
    return Grade(True, raw, leaderboard.position(raw), len(leaderboard), leaderboard.position_score(raw),
                 task.metric_name, task.direction, "", time.perf_counter() - start)
