"""Synthetic AutoResearch benchmark: tasks whose candidate solutions have known true scores.

Each task has ``K`` solution approaches. Approach ``k`` has a quality ``q_k`` (what its submission
scores when it runs) and a crash probability ``p_k`` (an invalid or missing submission scores 0, as in
MLE-Dojo). Ambitious approaches crash more often: ``p_k = crash_base + crash_slope * q_k``. A
trajectory that picks approach ``k`` yields a concrete solution whose true score ``r`` is 0 with
probability ``p_k`` and ``q_k`` otherwise; the policy's true objective is
``J = mean_tasks sum_k pi_k (1 - p_k) q_k``.

The crash risk is what makes a monotone world-model bias costly: an overconfident world model
(concave ``phi``) rates "runs and is mediocre" close to "runs and is excellent", so it prefers safe
mediocre approaches over risky good ones. That is a wrong optimum, not only a slower one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wmrl.simulate.config import SimulatorConfig


@dataclass(frozen=True)
class Benchmark:
    """The synthetic benchmark's ground truth (not a step Environment: ``softmax.py`` wraps it as those)."""

    quality: np.ndarray  # (T, K) score of a solution that runs
    crash: np.ndarray  # (T, K) probability that a solution of this approach crashes (score 0)
    exec_noise: float  # std of the grader's noise on a real execution

    @property
    def expected(self) -> np.ndarray:
        """(T, K) expected true score of each approach."""
        return (1.0 - self.crash) * self.quality

    @property
    def n_tasks(self) -> int:
        return int(self.quality.shape[0])

    @property
    def n_candidates(self) -> int:
        return int(self.quality.shape[1])

    def optimum(self) -> float:
        """J*: the best achievable expected true score (every task on its best approach)."""
        return float(self.expected.max(axis=1).mean())

    def score(self, probs: np.ndarray) -> float:
        """J(pi): expected true score of a policy with per-task probabilities ``probs`` (T, K)."""
        return float((probs * self.expected).sum(axis=1).mean())

    def rollout(self, tasks: np.ndarray, actions: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """True scores of the solutions produced: ``tasks`` (G,), ``actions`` (G, n) -> (G, n)."""
        crashed = rng.random(actions.shape) < self.crash[tasks[:, None], actions]
        return np.where(crashed, 0.0, self.quality[tasks[:, None], actions])

    def execute(self, true: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """What a real sandbox execution + grader reports for solutions of true score ``true``."""
        if self.exec_noise == 0.0:
            return true.copy()
        return np.clip(true + rng.normal(0.0, self.exec_noise, true.shape), 0.0, 1.0)


def make_benchmark(cfg: SimulatorConfig, seed: int) -> Benchmark:
    """The benchmark of a run: drawn from ``cfg.env_seed`` if set (shared by all seeds), else from ``seed``."""
    rng = np.random.default_rng([cfg.env_seed if cfg.env_seed is not None else seed, 1])
    quality = rng.beta(cfg.quality_alpha, cfg.quality_beta, size=(cfg.tasks, cfg.candidates))
    crash = cfg.crash_base + cfg.crash_slope * quality
    return Benchmark(quality=quality, crash=crash, exec_noise=cfg.exec_noise)
