"""The two records that cross the spool: an execution request and its outcome.

Both are plain JSON on shared storage. An outcome read back from disk is validated by
:func:`parse_outcome` before anything uses its score: a truncated, corrupt or mismatched file raises
:class:`InvalidResult` (and is quarantined by the reader), it is never taken for a score.
"""

from __future__ import annotations

import hashlib
import math
import re
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from wmrl import scores

# Ids become parts of file names "<request_id>.<worker_id>.json": no dots, no slashes.
ID_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,160}$")
OUTCOME_STATUSES = ("done", "failed")


def check_id(kind: str, value: str) -> str:
    if not isinstance(value, str) or not ID_PATTERN.match(value):
        raise ValueError(f"{kind} {value!r} is not allowed: use 1-160 characters from [A-Za-z0-9_-]")
    return value


def sanitize_id(text: str) -> str:
    """Turn arbitrary text (a hostname, a Slurm id) into something :func:`check_id` accepts."""
    cleaned = re.sub(r"[^A-Za-z0-9_-]+", "_", text).strip("_")
    return cleaned[:160] or "x"


def make_request_id(run_id: str, step: int, group_id: int, traj_id: int, turn: int = 0) -> str:
    """Deterministic id: a resumed coordinator that resubmits a step gets the same ids back, so work
    finished before the restart is reused, not redone. Names sort by step (FIFO claiming)."""
    tag = hashlib.sha1(run_id.encode("utf-8")).hexdigest()[:8]
    return f"s{step:07d}-g{group_id:03d}-t{traj_id:03d}-u{turn:02d}-{tag}"


@dataclass(frozen=True)
class ExecutionRequest:
    """One solution to execute in the sandbox and grade (one anchor trajectory's turn)."""

    request_id: str
    run_id: str
    step: int
    task_id: str
    group_id: int
    traj_id: int
    code: str
    timeout_s: float
    turn: int = 0
    created_at: float = field(default_factory=time.time)

    @classmethod
    def create(cls, run_id: str, step: int, task_id: str, group_id: int, traj_id: int, code: str,
               timeout_s: float, turn: int = 0) -> ExecutionRequest:
        rid = make_request_id(run_id, step, group_id, traj_id, turn)
        return cls(rid, run_id, step, task_id, group_id, traj_id, code, timeout_s, turn)

    def __post_init__(self) -> None:
        check_id("request_id", self.request_id)
        if not (isinstance(self.timeout_s, (int, float)) and self.timeout_s > 0):
            raise ValueError(f"request {self.request_id}: timeout_s={self.timeout_s!r} must be > 0")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExecutionRequest:
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        missing = [k for k in ("request_id", "run_id", "step", "task_id", "group_id", "traj_id",
                               "code", "timeout_s") if k not in known]
        if missing:
            raise ValueError(f"execution request is missing {', '.join(missing)}")
        return cls(**known)


@dataclass(frozen=True)
class ExecutionOutcomeRecord:
    """What a worker publishes to ``anchors/results/<request_id>.json``.

    ``status="done"``: the solution ran (whether it crashed or not is the grader's business) and
    ``score`` is its true score in [0, 1]. ``status="failed"``: the infrastructure gave up after
    ``max_attempts`` (worker deaths, work-function errors, corrupt results); ``score`` is None and the
    trainer must not use it as an anchor pair. ``outcome`` is the work function's payload
    (``ExecutionOutcome.to_dict()`` in production), ``exec_seconds`` its wall time.
    """

    request_id: str
    run_id: str
    status: str
    score: float | None
    outcome: dict[str, Any]
    worker_id: str
    attempt: int
    started_at: float
    finished_at: float
    exec_seconds: float
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class InvalidResult(ValueError):
    """A result file that must not be used (the message is the quarantine reason)."""


def check_score(score: Any) -> float:
    """A result's score, or :class:`InvalidResult` (the reader quarantines the file)."""
    try:
        return scores.check_score(score)
    except ValueError as err:
        raise InvalidResult(str(err)) from None


def parse_outcome(data: Any, expected_id: str) -> ExecutionOutcomeRecord:
    """Validate a decoded result file; raise :class:`InvalidResult` naming what is wrong."""
    if not isinstance(data, dict):
        raise InvalidResult(f"result is a {type(data).__name__}, not an object")
    fields = ExecutionOutcomeRecord.__dataclass_fields__
    required = [k for k in fields if k != "error"]
    missing = [k for k in required if k not in data]
    if missing:
        raise InvalidResult(f"result is missing fields: {', '.join(missing)}")
    if data["request_id"] != expected_id:
        raise InvalidResult(f"result names request {data['request_id']!r}, file is for {expected_id!r}")
    status = data["status"]
    if status not in OUTCOME_STATUSES:
        raise InvalidResult(f"status {status!r} is not one of {', '.join(OUTCOME_STATUSES)}")
    if status == "done":
        check_score(data["score"])
    elif data["score"] is not None:
        raise InvalidResult(f"a failed result carries score {data['score']!r}; it must be null")
    if not isinstance(data["outcome"], dict):
        raise InvalidResult("outcome is not an object")
    for key in ("attempt",):
        if isinstance(data[key], bool) or not isinstance(data[key], int):
            raise InvalidResult(f"{key} {data[key]!r} is not an integer")
    for key in ("started_at", "finished_at", "exec_seconds"):
        value = data[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise InvalidResult(f"{key} {value!r} is not a finite number")
    return ExecutionOutcomeRecord(**{k: data[k] for k in fields if k in data})
