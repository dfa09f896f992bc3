"""The records that flow through one WMRL step, and the narrow interfaces that produce and consume them.

One step (``wmrl/step.py``) wires three parts that know nothing of each other:

- a :class:`Policy` rolls out groups of trajectories for tasks. Each group talks to one
  :class:`Environment` for every turn: the *executed* environment (sandbox + grader, true score r) for
  anchor groups, the *world-model* environment (predicted score r_hat) for the others;
- an :class:`Environment` turns a batch of :class:`Submission` (a task and a solution's code) into
  :class:`Feedback` (the text the agent reads next turn, and a score), recording its own seconds and
  tokens;
- a :class:`Learner` takes per-trajectory advantages and per-group loss weights (Eq. 5) and updates
  the policy.

Implementations: the synthetic simulator (softmax policy over candidates, synthetic world model), the
anchored end-to-end trainer (real executions through the workers), and the LLM trainer (an agent that
writes code, a prompted LLM world model, the DeepSpeed GRPO learner).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

EXECUTED = "executed"  # role of an anchor group: every turn really executed, true score r
WORLD_MODEL = "world_model"  # role of a world-model group: every turn predicted, score r_hat
ROLES = (EXECUTED, WORLD_MODEL)


def content_key(task_id: str, code: str) -> str:
    """A solution's identity by content: the outcome caches' file name, the memory's and the executed
    environment's lookup key (the same code for the same task is the same program)."""
    return hashlib.sha256(f"{task_id}\0{code}".encode()).hexdigest()[:24]


PAIR_TURN = "pair"  # the turn field of an anchor trajectory's final solution scored by the world model


@dataclass(frozen=True)
class SubmissionId:
    """Where a submission sits in a run; its ``key`` (``step/group/trajectory/turn``) is unique within
    the run. ``turn=None``: the world model's score of an anchor trajectory's final solution (the anchor
    pair, key ``step/group/trajectory/pair``), no turn of its own."""

    step: int
    group: int
    trajectory: int
    turn: int | None

    @property
    def key(self) -> str:
        turn = PAIR_TURN if self.turn is None else self.turn
        return f"{self.step}/{self.group}/{self.trajectory}/{turn}"

    @classmethod
    def parse(cls, key: str) -> SubmissionId:
        """The one reader of a key: four integers, or three and ``pair``; a ValueError otherwise."""
        parts = key.split("/")
        try:
            if len(parts) != 4:
                raise ValueError
            step, group, trajectory = (int(p) for p in parts[:3])
            turn = None if parts[3] == PAIR_TURN else int(parts[3])
        except ValueError:
            raise ValueError(f"submission key {key!r} is not 'step/group/trajectory/turn' (four integers, "
                             f"or turn '{PAIR_TURN}')") from None
        return cls(step, group, trajectory, turn)


@dataclass(frozen=True)
class Submission:
    """One solution to evaluate. ``key`` is unique within a run (a :class:`SubmissionId`'s key in every
    trainer) and becomes the execution request id, so a retried evaluation can never be counted twice."""

    key: str
    task_id: str
    code: str

    @classmethod
    def at(cls, step: int, group: int, trajectory: int, turn: int | None, task_id: str, code: str) -> Submission:
        """The submission at these coordinates of the run, its key derived (:class:`SubmissionId`)."""
        return cls(SubmissionId(step, group, trajectory, turn).key, task_id, code)

    @property
    def id(self) -> SubmissionId:
        """Its coordinates, read back from the key (ValueError for a key no trainer writes)."""
        return SubmissionId.parse(self.key)


@dataclass
class Feedback:
    """What an environment says about one submission.

    ``score``: the position score in [0, 1] (true r when executed, r_hat from the world model); an
    invalid or missing submission scores 0. ``None`` means *no score at all*: an infrastructure failure
    (the workers gave up, a world-model call failed past its retries), never a property of the code.
    """

    key: str
    text: str  # the observation the agent reads next turn (paper Appendix E feedback format)
    score: float | None
    valid: bool  # a valid submission was produced
    status: str  # "ok", "error", "timeout", "memory", "disk_quota", "killed", "invalid", "failed" (infrastructure), ...
    seconds: float = 0.0  # measured wall seconds spent producing this feedback
    tokens: int = 0  # world-model prompt + completion tokens (0 when executed)
    details: dict[str, Any] = field(default_factory=dict)  # per-check verdicts, raw texts, grade, ...
    # measured CPU seconds of the executed program (its sandbox's processes); 0 from the world model and
    # for a reused outcome: what the execution cost on a core, whatever else shared the machine
    cpu_seconds: float = 0.0


class Environment(Protocol):
    """Turns submissions into feedback. ``role`` is :data:`EXECUTED` or :data:`WORLD_MODEL`."""

    role: str

    def evaluate(self, submissions: Sequence[Submission]) -> list[Feedback]:
        """One feedback per submission, in order. Never raises for bad code or bad model output."""
        ...


@dataclass
class Turn:
    """One turn of a trajectory, token-in / token-out.

    ``prompt_ids`` are the tokens appended *before* this turn's generation: the whole rendered prompt on
    the first turn, the tokenised observation (feedback) on later turns. The trajectory's token ids are
    the concatenation ``prompt_ids + generated_ids`` over its turns, never a re-rendering of the chat.
    """

    prompt_ids: list[int]
    generated_ids: list[int]
    logprobs: list[float]  # one per generated token, from the sampler
    text: str  # the generated text
    code: str | None  # the parsed solution, None when the reply had no usable code block
    parse_error: str | None  # why no code was taken (no block, unclosed fence, several blocks, ...)
    feedback: Feedback | None = None
    seconds: float = 0.0  # generation seconds of this turn


@dataclass
class Trajectory:
    """One of the n trajectories of a group.

    Its scores are held once: ``score`` is what the group's environment gave the kept submission (the true
    score r on an anchor trajectory, the world model's r_hat on a world-model one; ``None`` = infrastructure
    failure), and ``pair_score`` the world model's score of an anchor trajectory's final solution (the
    anchor pair's r_hat, set by the step). ``r`` and ``r_hat`` read them by role. ``seconds`` and ``tokens``
    are the policy's rollout (the world model's pair calls are the step's, counted in its totals).
    ``payload`` carries policy-specific data (the simulator's candidate index).
    """

    task_id: str
    group: int
    index: int
    role: str
    turns: list[Turn] = field(default_factory=list)
    score: float | None = None
    kept_turn: int | None = None  # the turn whose submission is kept (best valid, or last)
    final_code: str | None = None  # the kept submission's code
    pair_score: float | None = None
    payload: Any = None
    seconds: dict[str, float] = field(default_factory=dict)  # per phase: generation, world_model, execution
    tokens: dict[str, int] = field(default_factory=dict)  # per phase: generation, world_model

    @property
    def r(self) -> float | None:
        """The true score: an anchor trajectory's ``score``; None on a world-model trajectory."""
        return self.score if self.role == EXECUTED else None

    @property
    def r_hat(self) -> float | None:
        """The world model's score: a world-model trajectory's ``score``, an anchor trajectory's ``pair_score``."""
        return self.pair_score if self.role == EXECUTED else self.score

    def token_ids(self) -> list[int]:
        """The exact token sequence the policy saw and produced, turn after turn."""
        out: list[int] = []
        for t in self.turns:
            out += t.prompt_ids + t.generated_ids
        return out

    def loss_mask(self) -> list[int]:
        """1 on generated tokens, 0 on prompt and observation tokens (same length as token_ids)."""
        out: list[int] = []
        for t in self.turns:
            out += [0] * len(t.prompt_ids) + [1] * len(t.generated_ids)
        return out

    def logprobs(self) -> list[float]:
        """Sampler log-probs aligned with token_ids (0.0 on masked positions)."""
        out: list[float] = []
        for t in self.turns:
            out += [0.0] * len(t.prompt_ids) + list(t.logprobs)
        return out


Groups = list[list[Trajectory]]  # (G groups) x (n trajectories)


class Policy(Protocol):
    """Rolls out one group of ``n`` trajectories per task; group g talks to ``envs[g]`` every turn."""

    def rollout(
        self,
        step: int,
        task_ids: Sequence[str],
        n: int,
        envs: Sequence[Environment],
        rng: np.random.Generator,
    ) -> Groups: ...


class Learner(Protocol):
    """Takes one update on the fused gradient: ``advantages`` (G, n), ``weights`` (G,) sum to 1
    over the trained groups (Eq. 5); a group with weight 0 is not trained on. Returns metrics."""

    def update(self, groups: Groups, advantages: np.ndarray, weights: np.ndarray) -> dict[str, float]: ...
