"""The paper's evaluation metric: avg@k leaderboard position score, really executed.

For each task, k fresh trajectories of the policy are rolled out against the *executed* environment
(sandbox + grader, the same execution service as the anchors); the task's score is the mean position
score of their kept submissions (avg@k). Task scores are averaged within each category (tabular,
image, text, ...), then the category means are averaged: every category counts the same, however many
tasks it has (the paper's aggregation). An evaluation whose execution failed for infrastructure reasons
(score None) is left out of its task's mean and counted, never scored as 0.
"""

from __future__ import annotations

import math
import re
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from wmrl.progress import format_duration
from wmrl.rollout import Environment, Feedback, Policy, Submission, Trajectory


@dataclass
class TaskScore:
    task_id: str
    category: str
    scores: list[float]  # kept-submission position score of each evaluated trajectory
    failed: int = 0  # trajectories without a score (infrastructure failures)

    @property
    def mean(self) -> float:
        return float(np.mean(self.scores)) if self.scores else float("nan")


@dataclass
class EvalReport:
    k: int
    tasks: list[TaskScore]
    by_category: dict[str, float] = field(default_factory=dict)
    score: float = float("nan")  # mean over categories of the mean over their tasks of avg@k
    sample_mean: float = float("nan")  # mean over every evaluated trajectory (for seed-level statistics)
    valid_rate: float = float("nan")  # share of trajectories whose kept submission was valid
    seconds: float = 0.0
    # Why the other kept submissions were not valid: the exception's type, the run's status or the
    # grader's reason -> how many trajectories, commonest first (what a researcher reads first when
    # valid_rate is low).
    invalid: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["tasks"] = [{**asdict(t), "mean": t.mean} for t in self.tasks]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EvalReport:
        """The report ``to_dict`` wrote (its per-task ``mean`` is recomputed, not read)."""
        tasks = [TaskScore(t["task_id"], t["category"], list(t["scores"]), int(t.get("failed", 0)))
                 for t in data["tasks"]]
        return cls(**{**{k: v for k, v in data.items() if k != "tasks"}, "tasks": tasks})

    def metrics(self, prefix: str) -> dict[str, float]:
        """Flat metrics for MLflow: ``{prefix}/score``, ``{prefix}/<category>``, ``{prefix}/task/<id>``."""
        out = {f"{prefix}/score": self.score, f"{prefix}/sample_mean": self.sample_mean,
               f"{prefix}/valid_rate": self.valid_rate}
        out.update({f"{prefix}/{c}": v for c, v in self.by_category.items()})
        out.update({f"{prefix}/task/{t.task_id}": t.mean for t in self.tasks})
        return out

    def table(self) -> str:
        """A Markdown table a person reads: one row per task, then the category and overall means."""
        rows = ["| task | category | avg@k | n | failed |", "|---|---|---|---|---|"]
        for t in self.tasks:
            rows.append(f"| {t.task_id} | {t.category} | {t.mean:.4f} | {len(t.scores)} | {t.failed} |")
        for c, v in self.by_category.items():
            rows.append(f"| *{c} (mean)* | {c} | {v:.4f} | | |")
        rows.append(f"| **overall** (mean over categories) | | **{self.score:.4f}** | | |")
        if self.invalid:
            rows += ["", "Not valid: " + ", ".join(f"{why} ({n})" for why, n in self.invalid.items())]
        return "\n".join(rows)


def aggregate(tasks: Sequence[TaskScore], k: int, valid: Sequence[bool] = (), seconds: float = 0.0,
              invalid: Sequence[str] = ()) -> EvalReport:
    """Per-task avg@k -> per-category mean -> mean over categories (tasks with no score are skipped)."""
    scored = [t for t in tasks if t.scores]
    categories = sorted({t.category for t in scored})
    by_category = {c: float(np.mean([t.mean for t in scored if t.category == c])) for c in categories}
    samples = [s for t in scored for s in t.scores]
    return EvalReport(
        k=k, tasks=list(tasks), by_category=by_category,
        score=float(np.mean(list(by_category.values()))) if by_category else float("nan"),
        sample_mean=float(np.mean(samples)) if samples else float("nan"),
        valid_rate=float(np.mean(valid)) if len(valid) else float("nan"),
        seconds=seconds, invalid=dict(Counter(invalid).most_common()),
    )


def kept_valid(traj: Trajectory) -> bool:
    """The trajectory's kept submission was valid (executed and accepted by the grader)."""
    if traj.kept_turn is None or traj.kept_turn >= len(traj.turns):
        return False
    feedback = traj.turns[traj.kept_turn].feedback
    return bool(feedback is not None and feedback.valid)


_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning))\b")


def invalid_reason(traj: Trajectory) -> str:
    """One short line that counts well: why the kept submission of ``traj`` was not valid."""
    if traj.kept_turn is None or traj.kept_turn >= len(traj.turns) or traj.turns[traj.kept_turn].feedback is None:
        return "no code"
    feedback = traj.turns[traj.kept_turn].feedback
    result, grade = feedback.details.get("result") or {}, feedback.details.get("grade") or {}
    for line in reversed(str(result.get("traceback") or result.get("stderr_tail") or "").strip().splitlines()):
        if match := _EXCEPTION.match(line.strip()):
            return match.group(1).rsplit(".", 1)[-1]
    if feedback.status not in ("ok", "invalid"):
        return f"status {feedback.status}"
    # the grader's sentence without the names it quotes, so that reasons count across tasks
    reason = re.split(r"[:\[(`'\"]", str(grade.get("reason") or ""), maxsplit=1)[0].strip()
    return f"grader: {reason[:60]}" if reason else f"status {feedback.status}"


class _Reporting:
    """The evaluation's environment, saying after each batch of executions how far the evaluation got:
    an evaluation of real executions takes minutes, and a log file would otherwise stay silent."""

    def __init__(self, env: Environment, trajectories: int, say: Callable[[str], None]) -> None:
        self.env, self.trajectories, self.say = env, trajectories, say
        self.role = env.role
        self.batches = self.submissions = self.unscored = 0
        self.started = time.monotonic()

    def evaluate(self, submissions: Sequence[Submission]) -> list[Feedback]:
        feedbacks = self.env.evaluate(submissions)
        self.batches += 1
        self.submissions += len(submissions)
        self.unscored += sum(fb.score is None for fb in feedbacks)
        self.say(f"batch {self.batches}: {len(submissions)} submissions executed ({self.submissions} so far for "
                 f"{self.trajectories} trajectories, {self.unscored} without a score), "
                 f"{format_duration(time.monotonic() - self.started)} elapsed")
        return feedbacks


def evaluate(
    policy: Policy,
    env: Environment,
    tasks: Sequence[tuple[str, str]],
    k: int,
    rng: np.random.Generator,
    progress: Callable[[str], None] | None = None,
) -> EvalReport:
    """avg@k of ``policy`` on ``tasks`` = [(task_id, category)], every trajectory really executed by ``env``.

    Give ``env`` a request namespace of its own (e.g. an ExecutedEnvironment with its own run id), so that
    evaluation requests never collide with a training step's in the run's execution spool. ``progress``
    gets a line when the evaluation starts, after each batch of executions, and at its end."""
    if k < 1:
        raise ValueError(f"k={k}: evaluation needs at least one trajectory per task")
    t0 = time.perf_counter()
    if progress is not None:
        progress(f"{len(tasks)} tasks x k={k} = {len(tasks) * k} trajectories, every submission executed")
        env = _Reporting(env, len(tasks) * k, progress)
    groups = policy.rollout(0, [t for t, _ in tasks], k, [env] * len(tasks), rng)
    per_task, valid, invalid = [], [], []
    for (task_id, category), group in zip(tasks, groups):
        scores = [float(t.score) for t in group if t.score is not None and math.isfinite(t.score)]
        per_task.append(TaskScore(task_id, category, scores, failed=len(group) - len(scores)))
        valid += [kept_valid(t) for t in group]
        invalid += [invalid_reason(t) for t in group if t.score is not None and not kept_valid(t)]
    report = aggregate(per_task, k, valid, time.perf_counter() - t0, invalid)
    if progress is not None:
        progress(f"done in {format_duration(report.seconds)}: score {report.score:.4f}")
    return report


def evaluate_split(policy: Policy, env: Environment, tasks: Sequence[tuple[str, str]], k: int, seed: int,
                   step: int, split: str, progress: Callable[[str], None] | None = None) -> EvalReport:
    """The evaluation of one pool split after ``step`` steps, as ``wmrl train`` runs it and ``wmrl eval``
    repeats it: its own RNG stream from (seed, step, split), so evaluating does not change the training
    run's samples and the same checkpoint evaluated again draws the same trajectories."""
    rng = np.random.default_rng([seed, step, len(split)])
    return evaluate(policy, env, tasks, k, rng, progress)
