"""The world model as an :class:`~wmrl.rollout.Environment` (role ``world_model``).

For a batch of submissions: the static pre-check settles the certain failures; every other submission
gets the configured checks (all eight by default), all in ONE batched backend call; each answer is
parsed (:mod:`wmrl.world_model.verdict`) and the verdicts aggregate into r_hat and the simulated
feedback (:mod:`wmrl.world_model.aggregate`). Nothing the model or its server says can raise:
garbage becomes a counted fallback; a backend that fails past its retries (or raises, or returns the
wrong number of answers) gives ``score=None``, counted as an infrastructure failure with its kind.

Counters (``stats()``, cumulative) say how often each thing happened, for metrics and the must-show
measurements: calls, verdict statuses, parse problems, pre-check settlements and skips, infrastructure
failures (``failure:<kind>``). A batch's counts are added at its end, so they always add up:
``calls = (submissions - precheck_settled) * checks`` and
``verdict:* = (submissions - precheck_settled - infrastructure_failures) * checks``, where ``checks`` are
the LLM's: with the executed-solution memory (:mod:`wmrl.world_model.memory`) the quality check is the
memory's answer, counted as ``memory_quality`` (``memory_exact``: the memory held that very solution).
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
from wmrl.tasks.overview import task_overview
from wmrl.world_model.aggregate import aggregate
from wmrl.world_model.backends import Completion, WorldModelBackend
from wmrl.world_model.config import WorldModelConfig
from wmrl.world_model.memory import ExecutedMemory
from wmrl.world_model.precheck import DataInventory, PreCheck
from wmrl.world_model.prompts import (
    QUALITY,
    WorldModelContext,
    check_messages,
    get_checks,
    simulator_system_prompt,
)
from wmrl.world_model.verdict import CheckVerdict, parse_verdict

STATUS_OF_CHECK = {"compute": "timeout", "submission": "invalid"}  # any other failure: "error"


def _failure_kind(error: str) -> str:
    """``failed: APITimeoutError: ...`` -> ``APITimeoutError``: the counter key of an infrastructure failure."""
    parts = error.split(":")
    return parts[1].strip() if len(parts) > 1 and parts[1].strip().isidentifier() else "other"


@dataclass(frozen=True)
class TaskCase:
    """What the world model knows of a task: the agent's overview, the inventory, the leaderboard size."""

    overview: str
    inventory: DataInventory
    leaderboard_size: int | None = None

    @classmethod
    def from_task(cls, task: Any) -> TaskCase:
        try:
            size = len(task.leaderboard.scores)
        except Exception:  # noqa: BLE001 - a task without a readable leaderboard still gets predictions
            size = None
        return cls(task_overview(task), DataInventory.from_dir(Path(task.public_dir)), size)


class WorldModelEnvironment:
    role = WORLD_MODEL

    def __init__(self, backend: WorldModelBackend, cases: Mapping[str, TaskCase], cfg: WorldModelConfig,
                 runtime: SandboxRuntime, timeout_s: float = 1200.0, gpus: int = 0,
                 memory: ExecutedMemory | None = None) -> None:
        cfg.validate()
        self.backend = backend
        self.cases = dict(cases)
        self.cfg = cfg
        self.runtime = runtime
        self.memory = memory
        # With the executed-solution memory the quality check is its answer; the LLM answers the others.
        self.checks = [c for c in get_checks(cfg.checks) if memory is None or c.name != QUALITY]
        self.system = simulator_system_prompt(WorldModelContext(timeout_s, gpus, runtime), cfg.prompt_style)
        self.counts: Counter[str] = Counter()
        self._prechecks = {tid: PreCheck(case.inventory, runtime) for tid, case in self.cases.items()}

    def messages(self, task_id: str, code: str) -> list[list[dict[str, str]]]:
        """The configured checks' chat messages for one submission, in check order."""
        overview = self.cases[task_id].overview
        return [check_messages(self.system, c, overview, code, self.cfg.max_overview_chars) for c in self.checks]

    def evaluate(self, submissions: Sequence[Submission]) -> list[Feedback]:
        start = time.perf_counter()
        counts: Counter[str] = Counter()  # this batch's counts, added to self.counts at the end only
        out: list[Feedback | None] = [None] * len(submissions)
        requests: list[list[dict[str, str]]] = []
        owners: list[int] = []
        asked: list[int] = []  # the submissions the pre-check left to the world model
        for i, sub in enumerate(submissions):
            counts["submissions"] += 1
            if self.cfg.precheck:
                settlement = self._prechecks[sub.task_id].settle(sub.code)
                if settlement.skipped is not None:
                    counts["precheck_skipped"] += 1
                    counts[f"precheck_skipped:{settlement.skipped}"] += 1
                if settlement.verdict is not None:
                    counts["precheck_settled"] += 1
                    counts[f"precheck:{settlement.verdict.check}"] += 1
                    out[i] = self._feedback(sub, [settlement.verdict], [], 0.0)
                    continue
            asked.append(i)
            for messages in self.messages(sub.task_id, sub.code):
                requests.append(messages)
                owners.append(i)
        completions = self._complete(requests)
        counts["calls"] += len(completions)
        remembered = {}
        if self.memory is not None and asked:
            predictions = self.memory.predict([submissions[i].task_id for i in asked],
                                              [submissions[i].code for i in asked])
            remembered = {i: p.verdict() for i, p in zip(asked, predictions, strict=True)}
            counts["memory_quality"] += len(asked)
            counts["memory_exact"] += sum(p.exact for p in predictions)
        seconds = time.perf_counter() - start
        per_submission = seconds / max(len(asked), 1)
        for i, sub in enumerate(submissions):
            if out[i] is not None:
                continue
            mine = [c for c, owner in zip(completions, owners, strict=True) if owner == i]
            out[i] = self._from_completions(sub, mine, per_submission, counts, remembered.get(i))
        self.counts.update(counts)
        return [f for f in out if f is not None]

    def _complete(self, requests: list[list[dict[str, str]]]) -> list[Completion]:
        """The backend's completions, one per request; a backend that raises or miscounts fails them all."""
        if not requests:
            return []
        try:
            completions = list(self.backend.complete(requests))
        except Exception as err:  # noqa: BLE001 - a backend bug is an infrastructure failure, not a crash
            return [Completion("", error=f"failed: {type(err).__name__}: {str(err)[:300]}") for _ in requests]
        if len(completions) != len(requests) or not all(isinstance(c, Completion) for c in completions):
            why = f"failed: the backend gave {len(completions)} answers for {len(requests)} requests"
            return [Completion("", error=why) for _ in requests]
        return completions

    def _from_completions(self, sub: Submission, completions: list[Completion], seconds: float,
                          counts: Counter[str], remembered: CheckVerdict | None = None) -> Feedback:
        n_lines = max(len(sub.code.splitlines()), 1)
        tokens = sum(c.prompt_tokens + c.completion_tokens for c in completions)
        failed = [c for c in completions if c.failed]
        if failed:
            counts["infrastructure_failures"] += 1
            counts[f"failure:{_failure_kind(failed[0].error or '')}"] += 1
            return Feedback(sub.key, "", None, False, "failed", seconds, tokens,
                            {"error": failed[0].error, "raw": [c.text for c in completions]})
        verdicts = []
        for check, completion in zip(self.checks, completions, strict=True):
            prior = self.cfg.fallback_quality if check.name == "quality" else 0.0
            verdict = parse_verdict(completion.text, check.name, n_lines, prior)
            if completion.error:  # rejected request or malformed answer: a fallback like garbage output
                verdict.problems.append(completion.error.split(":")[0])
            verdict.problems.extend(completion.problems)
            counts[f"verdict:{verdict.status}"] += 1
            for problem in verdict.problems:
                counts[f"problem:{problem.split(':')[0]}"] += 1
            verdicts.append(verdict)
        if remembered is not None:
            verdicts.append(remembered)
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
        if self.memory is not None:
            out["memory_solutions"] = float(len(self.memory))
        return out

    def state_dict(self) -> dict[str, int]:
        """The cumulative counts, for a trainer's checkpoint (a resumed run continues them)."""
        return dict(self.counts)

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        self.counts = Counter({k: int(v) for k, v in state.items()})
