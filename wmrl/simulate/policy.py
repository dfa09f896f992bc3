"""Tabular softmax policy over candidate approaches, one row of logits per task."""

from __future__ import annotations

import numpy as np


class SoftmaxPolicy:
    def __init__(self, n_tasks: int, n_candidates: int) -> None:
        self.logits = np.zeros((n_tasks, n_candidates))  # uniform start: no prior on approaches

    def probs(self, tasks: np.ndarray | None = None) -> np.ndarray:
        z = self.logits if tasks is None else self.logits[tasks]
        z = z - z.max(axis=-1, keepdims=True)
        e = np.exp(z)
        return e / e.sum(axis=-1, keepdims=True)

    def sample(self, tasks: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` approaches per task (a GRPO group each): (G,) -> (G, n), by inverse-CDF sampling."""
        cdf = np.cumsum(self.probs(tasks), axis=1)
        u = rng.random((len(tasks), n)) * cdf[:, -1:]
        return np.minimum((u[:, :, None] > cdf[:, None, :]).sum(axis=2), cdf.shape[1] - 1)

    def gradient(
        self,
        tasks: np.ndarray,
        actions: np.ndarray,
        advantages: np.ndarray,
        group_weights: np.ndarray,
        entropy_coef: float = 0.0,
    ) -> np.ndarray:
        """Fused GRPO gradient on the logits: sum_g w_g [(1/n) sum_i A_i grad log pi(a_i) + c grad H(pi)].

        (Eq. 1, Eq. 5; the entropy bonus is the paper's Appendix D regulariser.) For a softmax row,
        grad_logits log pi(a) = onehot(a) - pi and grad_logits H = -pi (log pi + H). Tasks may repeat.
        """
        groups, n = actions.shape
        probs = self.probs(tasks)
        coef = group_weights[:, None] * advantages / n  # (G, n)
        per_group = -coef.sum(axis=1, keepdims=True) * probs  # the "- pi" part, (G, K)
        np.add.at(per_group, (np.repeat(np.arange(groups), n), actions.ravel()), coef.ravel())
        if entropy_coef > 0.0:
            log_p = np.log(np.maximum(probs, 1e-300))
            entropy = -(probs * log_p).sum(axis=1, keepdims=True)
            per_group -= entropy_coef * group_weights[:, None] * probs * (log_p + entropy)
        grad = np.zeros_like(self.logits)
        np.add.at(grad, tasks, per_group)
        return grad

    def step(self, grad: np.ndarray, lr: float) -> None:
        self.logits += lr * grad  # gradient ascent on the expected (surrogate) score
