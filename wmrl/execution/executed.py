"""The executed environment: each submission really runs in a sandbox on a worker and is graded.

Submissions become :class:`~wmrl.storage.records.ExecutionRequest` s (request id from the
submission's :class:`~wmrl.rollout.SubmissionId`, so a resubmitted step after a restart reuses finished
work and nothing is counted twice), go through the run's execution service (the coordinator's
``AnchorRunner``: submit, wait in slices, cancel what missed the deadline), and come back as
:class:`~wmrl.rollout.Feedback` with the *measured* seconds the worker recorded. A request the workers
gave up on, or that missed the deadline, is feedback with ``score=None`` (an infrastructure failure,
never a property of the code): the step drops its group from training.

With ``launch.reuse_executions`` a code this environment already ran for the same task is not run
again: its earlier outcome comes back (``details["reused"]`` names the request that ran it, and it
costs no execution seconds), and a code submitted twice in one batch runs once. Only for programs whose
outcome is a function of their code (seeded): a small policy repeats itself, and re-running the same
program then dominates the cost of real execution (results/train/execution_repeats.md). Kept in memory:
a restarted coordinator runs a code again the first time it meets it.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Protocol

from wmrl.execution.config import LaunchConfig
from wmrl.rollout import EXECUTED, Feedback, Submission, content_key
from wmrl.storage.records import ExecutionOutcomeRecord, ExecutionRequest

NO_RESULT = "The execution infrastructure gave up on this attempt; it is not counted."


class Runner(Protocol):
    """Submit requests, wait up to ``timeout_s``, return the outcomes that arrived (by request id).
    ``stop_event``: set when the process is exiting; other waits of the run watch it as well."""

    stop_event: threading.Event

    def execute(self, requests: list[ExecutionRequest], timeout_s: float) -> dict[str, ExecutionOutcomeRecord]: ...


class ExecutedEnvironment:
    """Real executions through ``runner``; ``timeout_s`` is the sandbox limit of one solution, which a
    loaded machine may stretch to ``max_wall_factor`` times in wall seconds (``sandbox.max_wall_factor``)."""

    role = EXECUTED

    def __init__(self, runner: Runner, run_id: str, timeout_s: float, launch: LaunchConfig,
                 max_wall_factor: float = 1.0) -> None:
        self.runner, self.run_id, self.timeout_s, self.launch = runner, run_id, timeout_s, launch
        self.max_wall_factor = max_wall_factor
        self.reused = 0  # submissions answered by an earlier execution (launch.reuse_executions)
        self._outcomes: dict[str, Feedback] = {}  # content key -> the feedback of its scored execution

    def deadline_s(self, n_requests: int) -> float:
        """How long a batch may take: every round of workers may need all its attempts and leases."""
        rounds = math.ceil(n_requests / max(1, self.launch.workers))
        wall_s = self.timeout_s * self.max_wall_factor
        return rounds * self.launch.max_attempts * (wall_s + self.launch.timing.lease_s) + 60.0

    def evaluate(self, submissions: Sequence[Submission]) -> list[Feedback]:
        if not submissions:
            return []
        if not self.launch.reuse_executions:
            return self._execute(list(submissions))
        keys = [content_key(s.task_id, s.code) for s in submissions]
        first: dict[str, Submission] = {}  # each new code once, its first submission's request running it
        for key, sub in zip(keys, submissions, strict=True):
            if key not in self._outcomes:
                first.setdefault(key, sub)
        ran = dict(zip(first, self._execute(list(first.values())), strict=True))
        self._outcomes.update({key: fb for key, fb in ran.items() if fb.score is not None})
        out = []
        for key, sub in zip(keys, submissions, strict=True):
            if sub is first.get(key):
                out.append(ran[key])
                continue
            earlier = self._outcomes.get(key, ran.get(key))  # a failed first run: its copies failed too
            out.append(replace(earlier, key=sub.key, seconds=0.0, cpu_seconds=0.0,
                               details={**earlier.details, "reused": earlier.details.get("request_id")}))
            self.reused += earlier.score is not None
        return out

    def _execute(self, submissions: list[Submission]) -> list[Feedback]:
        requests = [self.request(s) for s in submissions]
        done = self.runner.execute(requests, self.deadline_s(len(requests))) if requests else {}
        return [to_feedback(s.key, done.get(r.request_id)) for s, r in zip(submissions, requests, strict=True)]

    def request(self, sub: Submission) -> ExecutionRequest:
        at = sub.id
        if at.turn is None:  # an anchor pair is the world model's score of an executed solution
            raise ValueError(f"submission key {sub.key!r}: an execution is one turn; 'step/group/trajectory/turn' "
                             "needs an integer turn")
        return ExecutionRequest.create(self.run_id, at.step, sub.task_id, at.group, at.trajectory, sub.code,
                                       self.timeout_s, at.turn)


def to_feedback(key: str, record: ExecutionOutcomeRecord | None) -> Feedback:
    """The worker's record as feedback: score, validity, status and text from its outcome."""
    if record is None:  # missed the deadline (cancelled)
        return Feedback(key, NO_RESULT, None, False, "failed", details={"error": "no result by the deadline"})
    outcome: dict[str, Any] = record.outcome
    result = outcome.get("result") or {}
    # the sandbox's measured CPU of the program (real work), or the work function's own (python_work)
    cpu = float(result.get("cpu_seconds", outcome.get("cpu_seconds")) or 0.0)
    if record.status != "done" or record.score is None:
        return Feedback(key, NO_RESULT, None, False, "failed", gpu_seconds(record),
                        details={"error": record.error, "request_id": record.request_id}, cpu_seconds=cpu)
    grade = outcome.get("grade") or {}
    text = outcome.get("feedback") or outcome.get("stdout_tail") or ""
    valid = bool(grade.get("valid", record.score > 0.0))
    status = str(result.get("status") or outcome.get("status") or "ok")
    return Feedback(key, text, float(record.score), valid, status, gpu_seconds(record),
                    details={"request_id": record.request_id, "worker_id": record.worker_id, **outcome},
                    cpu_seconds=cpu)


def gpu_seconds(record: ExecutionOutcomeRecord) -> float:
    """The execution's cost: its measured seconds, times its GPU share when several executions shared
    the GPU (``launch.executions_per_gpu``; the worker records ``gpu_fraction``)."""
    return record.exec_seconds * float(record.outcome.get("gpu_fraction", 1.0))
