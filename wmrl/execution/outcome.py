"""Run one solution for one task in a sandbox, grade it outside, and write the agent's feedback.

    outcome = execute_and_grade(task, code, make_backend(cfg.sandbox), limits, work_root)
    outcome.grade.position_score   # the true reward r in [0, 1]
    outcome.feedback               # what the agent reads next turn (paper, Appendix E)
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from wmrl.grading.grader import Grade, grade_submission
from wmrl.grading.metrics import MAXIMIZE
from wmrl.grading.validate import DEFAULT_MAX_BYTES
from wmrl.sandbox.base import ExecutionResult, SandboxBackend, SandboxLimits

FEEDBACK_OUTPUT_CHARS = 4000  # printed output kept in the feedback (observations are truncated later)
FEEDBACK_TRACEBACK_CHARS = 6000
# What counts toward each limit, so the agent can write a solution that stays under it.
LIMIT_HINTS = {
    "memory": "Memory counts all processes together, and files kept in an in-memory /tmp or /dev/shm.",
    "disk_quota": "The disk quota counts every file the code writes (work directory, temporary "
    "directories), deleted files still held open included.",
}


@dataclass
class ExecutionOutcome:
    task_id: str
    result: ExecutionResult
    grade: Grade
    feedback: str
    exec_seconds: float  # wall seconds of the sandbox run, including its start-up
    grade_seconds: float
    total_seconds: float

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["result"], out["grade"] = self.result.to_dict(), self.grade.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExecutionOutcome:
        data = dict(data)
        data["result"] = ExecutionResult.from_dict(data["result"])
        data["grade"] = Grade.from_dict(data["grade"])
        return cls(**data)


def _tail(text: str, limit: int) -> str:
    text = text or ""
    if len(text) <= limit:
        return text
    return f"[... {len(text) - limit} earlier characters omitted]\n" + text[-limit:]


def format_feedback(result: ExecutionResult, grade: Grade, timeout_s: float | None = None) -> str:
    """The paper's feedback: printed output plus Position and Raw Score, or the full traceback."""
    lines: list[str] = []
    if result.status == "ok":
        lines.append(f"Execution finished (status: ok, {result.wall_seconds:.1f} s).")
    elif result.status == "timeout":
        limit = f" of {timeout_s:.0f} s" if timeout_s else ""
        lines.append(f"Execution exceeded the time limit{limit} and was stopped ({result.wall_seconds:.1f} s).")
    elif result.status in ("memory", "disk_quota"):
        what = "memory limit" if result.status == "memory" else "disk quota"
        why = result.extra.get("limit_detail", f"it passed its {what}")
        lines.append(f"Execution was stopped at its {what}: {why} ({result.wall_seconds:.1f} s).")
        lines.append(LIMIT_HINTS[result.status])
    elif result.status == "killed":
        why = result.extra.get("kill_reason", "a resource limit")
        lines.append(f"Execution was killed ({why}; exit code {result.exit_code}, {result.wall_seconds:.1f} s).")
    else:
        lines.append(f"Execution failed (status: error, exit code {result.exit_code}, {result.wall_seconds:.1f} s).")
    lines += ["--- printed output ---", _tail(result.stdout_tail, FEEDBACK_OUTPUT_CHARS).rstrip() or "(nothing printed)"]
    if result.status != "ok":
        error = result.traceback or result.stderr_tail or "(no traceback)"
        lines += ["--- error ---", _tail(error, FEEDBACK_TRACEBACK_CHARS).rstrip()]
    lines.append("--- result ---")
    if grade.valid:
        better = "higher is better" if grade.direction == MAXIMIZE else "lower is better"
        where = f"Position {grade.position} of {grade.leaderboard_size} on the leaderboard"
        if len(grade.boards) > 1:  # MLE-Dojo: the score is the mean over its private and public boards
            where = ", ".join(f"Position {int(b['position'])} of {int(b['size'])} on the {name} leaderboard"
                              for name, b in grade.boards.items())
        lines.append(
            f"Valid submission. {where} (Position Score {grade.position_score:.3f}"
            f"{', their mean' if len(grade.boards) > 1 else ''}). Raw Score: {grade.raw_score:.6g} "
            f"({grade.metric}, {better})."
        )
    else:
        lines.append(f"No valid submission: {grade.reason}. Position Score 0.")
    return "\n".join(lines) + "\n"


def _grade_result(task: Any, result: ExecutionResult, max_bytes: int) -> Grade:
    if result.status != "ok":
        # The paper's contract: a score is earned only when the code runs AND writes a valid submission.
        grade = grade_submission(task, None, max_bytes)
        grade.reason = f"the code did not finish successfully (status: {result.status})"
        return grade
    if result.submission_path is None and result.extra.get("submission_rejected"):
        grade = grade_submission(task, None, max_bytes)
        grade.reason = f"submission rejected: {result.extra['submission_rejected']}"
        return grade
    return grade_submission(task, result.submission_path, max_bytes)


def _remove_tree(path: Path) -> None:
    """Delete a work dir even where the solution removed its own write permissions."""

    def fix(func: Any, target: str, _exc: Any) -> None:
        try:
            os.chmod(os.path.dirname(target), stat.S_IRWXU)
            os.chmod(target, stat.S_IRWXU)
            func(target)
        except OSError:
            pass

    shutil.rmtree(path, onerror=fix)


def execute_and_grade(
    task: Any,
    code: str,
    backend: SandboxBackend,
    limits: SandboxLimits,
    work_root: Path,
    max_submission_bytes: int = DEFAULT_MAX_BYTES,
    keep_work_dir: bool = False,
) -> ExecutionOutcome:
    """Run ``code`` on ``task`` in a fresh work dir under ``work_root``; grade; build the feedback.

    Never raises for anything the solution does. Infrastructure failures (a sandbox that cannot
    start, a broken task directory) raise, so callers can retry instead of rewarding 0.
    """
    start = time.perf_counter()
    Path(work_root).mkdir(parents=True, exist_ok=True)
    work_dir = Path(tempfile.mkdtemp(prefix=f"{task.task_id}-", dir=work_root))
    try:
        result = backend.run(code, Path(task.public_dir), work_dir, limits)
        exec_seconds = time.perf_counter() - start
        grade = _grade_result(task, result, max_submission_bytes)
        grade_seconds = time.perf_counter() - start - exec_seconds
        feedback = format_feedback(result, grade, limits.timeout_s)
    finally:
        if not keep_work_dir:
            _remove_tree(work_dir)
    return ExecutionOutcome(task.task_id, result, grade, feedback, exec_seconds, grade_seconds,
                            time.perf_counter() - start)
