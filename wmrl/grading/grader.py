"""Grade a submission against a task's hidden answers: validate, score, place on the leaderboard.

Runs outside the sandbox and never raises for anything the submission contains: an invalid or
missing submission, or any failure while scoring it, gives ``Grade(valid=False, position_score=0)``
with the reason. The task's ``GradingRules`` say how the raw score becomes the reward: rounding
(MLE-bench), the mean over private and public boards (MLE-Dojo), medals (MLE-bench).
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from wmrl.grading.medals import medal_for
from wmrl.grading.validate import (
    DEFAULT_MAX_BYTES,
    answers_matrix,
    check_probability_rows,
    validate_submission,
)


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
    # Per board ("private", "public"): its position and position score; position_score above is
    # their mean under MLE-Dojo's rule, else the private board's.
    boards: dict[str, dict[str, float]] = field(default_factory=dict)
    medal: str | None = None  # MLE-bench tasks: "gold", "silver", "bronze" or "" (none)
    above_median: bool | None = None  # MLE-bench tasks

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Grade:
        return cls(**data)


def grade_submission(task: Any, submission_path: Path | str | None, max_bytes: int = DEFAULT_MAX_BYTES) -> Grade:
    """Grade ``submission_path`` for ``task`` (a :class:`wmrl.tasks.task.Task`)."""
    start = time.perf_counter()
    leaderboard = task.leaderboard  # task errors (broken private side) are infrastructure errors: raise
    boards = task.leaderboards()
    answers = task.answers()
    rules = task.rules

    def invalid(reason: str) -> Grade:
        medal = medal_for(None, leaderboard) if rules.medals else None
        return Grade(False, None, None, len(leaderboard), 0.0, task.metric_name, task.direction, reason,
                     time.perf_counter() - start, medal=medal and medal.medal,
                     above_median=medal and medal.above_median)

    if submission_path is None:
        return invalid("no submission file was written at SUBMISSION_PATH")
    metric = task.metric
    try:
        check = validate_submission(Path(submission_path), answers, task.id_column, task.target_columns, metric, max_bytes)
        if not check.valid:
            return invalid(check.reason)
        if rules.probability_sum_atol is not None:
            reason = check_probability_rows(check.y_pred, rules.probability_sum_atol)
            if reason:
                return invalid(reason)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            raw = metric(answers_matrix(answers, task.target_columns, metric), check.y_pred)
    except Exception as err:  # noqa: BLE001 - e.g. a label column a metric cannot score; the submission's fault
        return invalid(f"submission could not be scored with {metric.name}: {type(err).__name__}: {err}")
    if not math.isfinite(raw):
        return invalid(f"{metric.name} of the submission is not finite ({raw})")
    if rules.round_digits is not None:
        raw = round(raw, rules.round_digits)
    placed = {name: {"position": board.position(raw), "size": len(board), "position_score": board.position_score(raw)}
              for name, board in boards.items()}
    # MLE-Dojo's reward: the mean of the boards' position scores (sum, then divide, as it does).
    reward = sum(p["position_score"] for p in placed.values()) / len(placed)
    medal = medal_for(raw, leaderboard) if rules.medals else None
    return Grade(True, raw, leaderboard.position(raw), len(leaderboard), reward, task.metric_name, task.direction,
                 "", time.perf_counter() - start, boards=placed, medal=medal and medal.medal,
                 above_median=medal and medal.above_median)
