"""The simulator's parts as the step's protocols: a softmax policy over candidate solutions (Policy and
Learner), a synthetic execution and a synthetic world model (Environments).

A trajectory is one turn: it picks candidate ``k`` of its task and submits that candidate's code.
``solutions(tasks, actions, rng)`` says what the code is: in ``wmrl simulate`` a tiny script that prints
its (hidden) true score, drawn from the synthetic benchmark; in the anchored run the real reference
solution. The synthetic world model predicts ``r_hat = phi(r) + noise`` from the true score that
``truth(submission)`` returns, at the step the trainer sets on it (drift and degradation depend on it).
Environments draw from the run's RNG in the order they are called; the policy evaluates one batch per
distinct environment, in the order of the groups.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from wmrl.rollout import (
    EXECUTED,
    WORLD_MODEL,
    Environment,
    Feedback,
    Groups,
    Submission,
    Trajectory,
    Turn,
)
from wmrl.simulate.benchmark import Benchmark
from wmrl.simulate.policy import SoftmaxPolicy
from wmrl.simulate.world_model import SyntheticWorldModel

Solutions = Callable[[np.ndarray, np.ndarray, np.random.Generator], list[list[str]]]
Truth = Callable[[Submission], float]


def phase(env: Environment) -> str:
    return "execution" if env.role == EXECUTED else "world_model"


def printed_score(code: str) -> float:
    """The score a synthetic solution ``print(<score>)`` prints (its true score)."""
    return float(code.strip().rsplit("\n", 1)[-1].removeprefix("print(").removesuffix(")"))


def synthetic_solutions(bench: Benchmark) -> Solutions:
    """Solutions of the synthetic benchmark: each crashes (score 0) or scores its approach's quality."""

    def solutions(tasks: np.ndarray, actions: np.ndarray, rng: np.random.Generator) -> list[list[str]]:
        scores = bench.rollout(tasks, actions, rng)
        return [[f"print({float(x)!r})" for x in row] for row in scores]

    return solutions


class SoftmaxAgent:
    """:class:`~wmrl.rollout.Policy` over a :class:`SoftmaxPolicy`; ``task_index`` maps task ids to rows."""

    def __init__(self, policy: SoftmaxPolicy, task_index: Mapping[str, int], solutions: Solutions) -> None:
        self.policy, self.task_index, self.solutions = policy, dict(task_index), solutions

    def rollout(self, step: int, task_ids: Sequence[str], n: int, envs: Sequence[Environment],
                rng: np.random.Generator) -> Groups:
        started = time.perf_counter()
        tasks = np.array([self.task_index[t] for t in task_ids], dtype=int)
        actions = self.policy.sample(tasks, n, rng)
        codes = self.solutions(tasks, actions, rng)
        per_trajectory = (time.perf_counter() - started) / max(1, actions.size)  # measured, shared equally
        groups = [[Trajectory(task_id, g, i, envs[g].role, payload=int(actions[g, i])) for i in range(n)]
                  for g, task_id in enumerate(task_ids)]
        batches: dict[int, list[tuple[Trajectory, Submission]]] = {}
        for g, group in enumerate(groups):
            for t in group:
                sub = Submission.at(step, g, t.index, 0, t.task_id, codes[g][t.index])
                t.turns.append(Turn([], [], [], "", sub.code, None, seconds=per_trajectory))
                t.seconds["generation"] = per_trajectory
                batches.setdefault(id(envs[g]), []).append((t, sub))
        env_of = {id(env): env for env in envs}
        for env_id, batch in batches.items():
            env = env_of[env_id]
            for (t, sub), fb in zip(batch, env.evaluate([sub for _, sub in batch]), strict=True):
                t.turns[0].feedback = fb
                t.score, t.kept_turn, t.final_code = fb.score, 0, sub.code
                t.seconds[phase(env)] = t.seconds.get(phase(env), 0.0) + fb.seconds
                if fb.tokens:
                    t.tokens[phase(env)] = t.tokens.get(phase(env), 0) + fb.tokens
        return groups


class SoftmaxLearner:
    """:class:`~wmrl.rollout.Learner`: one ascent step of size ``lr`` on the fused gradient (Eq. 1, 5)."""

    def __init__(self, policy: SoftmaxPolicy, task_index: Mapping[str, int], lr: float,
                 entropy_coef: float = 0.0) -> None:
        self.policy, self.task_index, self.lr, self.entropy_coef = policy, dict(task_index), lr, entropy_coef

    def update(self, groups: Groups, advantages: np.ndarray, weights: np.ndarray) -> dict[str, float]:
        tasks = np.array([self.task_index[group[0].task_id] for group in groups], dtype=int)
        actions = np.array([[t.payload for t in group] for group in groups], dtype=int)
        grad = self.policy.gradient(tasks, actions, advantages, weights, self.entropy_coef)
        self.policy.step(grad, self.lr)
        return {"grad_norm": float(np.linalg.norm(grad))}


class SyntheticExecution:
    """The executed environment of ``wmrl simulate``: the grader reports the true score (plus
    ``exec_noise``); a synthetic execution never fails and costs no measured time."""

    role = EXECUTED

    def __init__(self, bench: Benchmark, rng: np.random.Generator) -> None:
        self.bench, self.rng = bench, rng

    def evaluate(self, submissions: Sequence[Submission]) -> list[Feedback]:
        true = np.array([printed_score(s.code) for s in submissions], dtype=float)
        scores = self.bench.execute(true, self.rng)
        return [Feedback(s.key, f"score {x:.4f}", float(x), bool(x > 0.0), "ok")
                for s, x in zip(submissions, scores, strict=True)]


class SyntheticWorldModelEnv:
    """The synthetic world model as an environment: ``r_hat = phi(r) + offsets + noise`` at step
    ``self.step``. Submissions are predicted group by group (the group is the key's second field), so
    a per-group offset is shared by a group's trajectories; ``task_index`` gives each task's row (the
    per-task offset applies to the first rows)."""

    role = WORLD_MODEL

    def __init__(self, model: SyntheticWorldModel, truth: Truth, rng: np.random.Generator,
                 task_index: Mapping[str, int]) -> None:
        self.model, self.truth, self.rng, self.task_index = model, truth, rng, dict(task_index)
        self.step = 0  # the trainer sets it before each step

    def evaluate(self, submissions: Sequence[Submission]) -> list[Feedback]:
        started = time.perf_counter()
        groups: dict[int, list[int]] = {}
        for i, sub in enumerate(submissions):
            groups.setdefault(sub.id.group, []).append(i)
        r_hat = np.empty(len(submissions))
        rows = list(groups.values())
        true = [[self.truth(submissions[i]) for i in members] for members in rows]
        tasks = np.array([self.task_index[submissions[members[0]].task_id] for members in rows])
        if len({len(members) for members in rows}) == 1 and self.model.one_draw_per_score(self.step):
            # one call for all groups: the same draws, in the same order, as one call per group
            for members, row in zip(rows, self.model.predict(np.array(true), self.step, self.rng, tasks),
                                    strict=True):
                r_hat[members] = row
        else:
            for members, row_true, task in zip(rows, true, tasks, strict=True):
                r_hat[members] = self.model.predict(np.array([row_true]), self.step, self.rng, task[None])[0]
        seconds = (time.perf_counter() - started) / max(1, len(submissions))
        return [Feedback(s.key, f"predicted score {x:.4f}", float(x), bool(x > 0.0), "ok", seconds)
                for s, x in zip(submissions, r_hat, strict=True)]
