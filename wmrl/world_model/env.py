"""The world model as an :class:`~wmrl.rollout.Environment` (role ``world_model``).

For a batch of submissions: the static pre-check settles the certain failures; every other submission
gets the configured checks (all eight by default), all in ONE batched backend call; each answer is
parsed (:mod:`wmrl.world_model.verdict`) and the verdicts aggregate into r_hat and the simulated
feedback (:mod:`wmrl.world_model.aggregate`). Nothing the model says can raise: garbage becomes a
counted fallback. Only a backend that fails past its retries gives ``score=None``.

Counters (``stats()``, cumulative) say how often each thing happened, for metrics and the must-show
measurements: calls, verdict statuses, parse problems, pre-check settlements, infrastructure failures.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wmrl.rollout import WORLD_MODEL, Feedback, Submission
from wmrl.sandbox.probe import SandboxRuntime
from wmrl.world_model.aggregate import aggregate
from wmrl.world_model.backends import Completion, WorldModelBackend
from wmrl.world_model.config import WorldModelConfig
from wmrl.world_model.precheck import DataInventory, PreCheck
from wmrl.world_model.prompts import (
    WorldModelContext,
    check_messages,
    get_checks,
    simulator_system_prompt,
)
from wmrl.world_model.verdict import CheckVerdict, parse_verdict

STATUS_OF_CHECK = {"compute": "timeout", "submission": "invalid"}  # any other failure: "error"


@dataclass(frozen=True)
class TaskCase:
    """What the world model knows of a task: the agent's overview, the inventory, the leaderboard size."""

    overview: str
    inventory: DataInventory
    leaderboard_size: int | None = None

    @classmethod
    def from_task(cls, task: Any) -> TaskCase:
        from wmrl.tasks.overview import task_overview

        try:
            size = len(task.leaderboard.scores)
        except Exception:  # noqa: BLE001 - a task without a readable leaderboard still gets predictions
            size = None
        return cls(task_overview(task), DataInventory.from_dir(Path(task.public_dir)), size)


class WorldModelEnvironment:
    role = WORLD_MODEL

    def __init__(self, backend: WorldModelBackend, cases: Mapping[str, TaskCase], cfg: WorldModelConfig,
                 runtime: SandboxRuntime, timeout_s: float = 1200.0, gpus: int = 0) -> None:
        cfg.validate()
        self.backend = backend
        self.cases = dict(cases)
        self.cfg = cfg
        self.runtime = runtime
        self.checks = get_checks(cfg.checks)
        self.system = simulator_system_prompt(WorldModelContext(timeout_s, gpus, runtime), cfg.prompt_style)
        self.counts: Counter[str] = Counter()
        self._prechecks = {tid: PreCheck(case.inventory, runtime) for tid, case in self.cases.items()}

    def messages(self, task_id: str, code: str) -> list[list[dict[str, str]]]:
        """The configured checks' chat messages for one submission, in check order."""
        overview = self.cases[task_id].overview
        return [check_messages(self.system, c, overview, code, self.cfg.max_overview_chars) for c in self.checks]

    def evaluate(self, submissions: Sequence[Submission]) -> list[Feedback]:
        start = time.perf_counter()
        out: list[Feedback | None] = [None] * len(submissions)
        requests: list[list[dict[str, str]]] = []
        owners: list[int] = []
        for i, sub in enumerate(submissions):
            self.counts["submissions"] += 1
            settled = self._prechecks[sub.task_id].check(sub.code) if self.cfg.precheck else None
            if settled is not None:
                self.counts["precheck_settled"] += 1
                self.counts[f"precheck:{settled.check}"] += 1
                out[i] = self._feedback(sub, [settled], [], 0.0)
                continue
            for messages in self.messages(sub.task_id, sub.code):
                requests.append(messages)
                owners.append(i)
        completions = self.backend.complete(requests) if requests else []
        self.counts["calls"] += len(completions)
        seconds = time.perf_counter() - start
        per_call = seconds / max(len(completions), 1)
        for i, sub in enumerate(submissions):
            if out[i] is not None:
                continue
            mine = [c for c, owner in zip(completions, owners, strict=True) if owner == i]
            out[i] = self._from_completions(sub, mine, per_call * len(mine))
        return [f for f in out if f is not None]

    def _from_completions(self, sub: Submission, completions: list[Completion], seconds: float) -> Feedback:
        n_lines = max(len(sub.code.splitlines()), 1)
        tokens = sum(c.prompt_tokens + c.completion_tokens for c in completions)
        failed = [c for c in completions if c.failed]
        if failed:
            self.counts["infrastructure_failures"] += 1
            return Feedback(sub.key, "", None, False, "failed", seconds, tokens,
                            {"error": failed[0].error, "raw": [c.text for c in completions]})
        verdicts = []
        for check, completion in zip(self.checks, completions, strict=True):
            prior = self.cfg.fallback_quality if check.name == "quality" else 0.0
            verdict = parse_verdict(completion.text, check.name, n_lines, prior)
            if completion.error:  # rejected request: a fallback like garbage output
                verdict.problems.append(completion.error.split(":")[0])
            self.counts[f"verdict:{verdict.status}"] += 1
            for problem in verdict.problems:
                self.counts[f"problem:{problem.split(':')[0]}"] += 1
            verdicts.append(verdict)
        return self._feedback(sub, verdicts, [c.text for c in completions], seconds, tokens)

    def _feedback(self, sub: Submission, verdicts: list[CheckVerdict], raw: list[str], seconds: float,
                  tokens: int = 0) -> Feedback:
        case = self.cases[sub.task_id]
        pred = aggregate(verdicts, case.leaderboard_size, self.cfg.fail_threshold, self.cfg.fallback_quality)
        status = "ok" if pred.predicted_valid else STATUS_OF_CHECK.get(pred.deciding or "", "error")
        details = {
            "verdicts": [v.to_dict() for v in verdicts],
            "raw": raw,
            "precheck": any(v.source == "precheck" for v in verdicts),
            "deciding": pred.deciding,
        }
        return Feedback(sub.key, pred.feedback, pred.r_hat, pred.predicted_valid, status, seconds, tokens, details)

    def stats(self) -> dict[str, float]:
        """Cumulative counts plus the rates a person asks for first."""
        out = {k: float(v) for k, v in self.counts.items()}
        verdicts = sum(v for k, v in self.counts.items() if k.startswith("verdict:"))
        if verdicts:
            out["parse_fallback_rate"] = self.counts["verdict:fallback"] / verdicts
        if self.counts["submissions"]:
            out["precheck_rate"] = self.counts["precheck_settled"] / self.counts["submissions"]
        return out

    def state_dict(self) -> dict[str, int]:
        """The cumulative counts, for a trainer's checkpoint (a resumed run continues them)."""
        return dict(self.counts)

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        self.counts = Counter({k: int(v) for k, v in state.items()})
