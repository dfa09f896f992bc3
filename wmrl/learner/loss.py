"""The GRPO + WMRL loss as pure functions of plain numbers and tensors (no model, no engine).

``loss_coefficients`` folds the Eq. 5 group weights ``w_k`` and the aggregation ``learner.loss_agg``
into one coefficient per trajectory; ``token_loss`` turns per-token log-probs into the loss

    L = sum_t coef_t * [ pg_t + beta * kl_t - c * H_t ]

and its statistics (module docstring of ``wmrl/learner/grpo.py`` and docs/learner.md for the terms).
The learner calls both; the tests call them with hand-made tensors.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from wmrl.learner.config import LearnerConfig
from wmrl.rollout import Groups

# Per-token statistics summed over the loss tokens (then over micro-batches and ranks, then divided by
# the token count for the metrics), in the order of ``TokenLoss.sums``.
STAT_SUMS: tuple[str, ...] = ("pg", "kl", "entropy", "ratio_dev", "clipped", "tokens")


def loss_coefficients(
    groups: Groups, weights: np.ndarray, loss_agg: str, token_sum_norm: int
) -> list[list[float]]:
    """``coef[k][i]``: trajectory i of group k adds ``coef * sum_t loss_t`` over its generated tokens.

    With n trajectories in group k and L_i generated tokens in trajectory i:
    seq-mean-token-mean ``w_k / (n L_i)``; token-mean ``w_k / sum_j L_j``;
    seq-mean-token-sum-norm ``w_k / (n * token_sum_norm)``. A trajectory without generated tokens
    has nothing to train on (coefficient 0).
    """
    coefs: list[list[float]] = []
    for k, group in enumerate(groups):
        lengths = [sum(t.loss_mask()) for t in group]
        n, w = len(group), float(weights[k])
        if w == 0.0 or sum(lengths) == 0:
            coefs.append([0.0] * n)
        elif loss_agg == "seq-mean-token-mean":
            coefs.append([w / (n * L) if L else 0.0 for L in lengths])
        elif loss_agg == "token-mean":
            coefs.append([w / sum(lengths)] * n)
        elif loss_agg == "seq-mean-token-sum-norm":
            coefs.append([w / (n * token_sum_norm)] * n)
        else:
            raise ValueError(f"unknown loss aggregation {loss_agg!r}")
    return coefs


@dataclass(frozen=True)
class TokenLoss:
    loss: torch.Tensor  # scalar to backpropagate: sum_t coef_t * mask_t * per-token loss
    sums: torch.Tensor  # float64 (len(STAT_SUMS),), detached: each statistic summed over the loss tokens
    ratio_max: torch.Tensor  # float64 (1,), detached: the largest raw importance ratio (0 without tokens)

    def total(self, name: str) -> float:
        return float(self.sums[STAT_SUMS.index(name)])


def token_loss(
    logp: torch.Tensor,
    entropy: torch.Tensor,
    sampler_logp: torch.Tensor,
    advantages: torch.Tensor,
    coefs: torch.Tensor,
    cfg: LearnerConfig,
    *,
    raw_logp: torch.Tensor | None = None,
    ref_logp: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
) -> TokenLoss:
    """The loss of a set of tokens (any shape; every tensor of the same shape, one entry per token).

    ``logp``/``entropy``: the tempered policy ``softmax(logits / T)`` (with gradients);
    ``raw_logp``: the same tokens' log-probs before temperature (default ``logp``, i.e. T = 1), the
    scale the generators report ``sampler_logp`` on; ``ref_logp``: the reference policy's tempered
    log-probs (None: no KL term); ``advantages``/``coefs``: of each token's trajectory; ``mask``: 1
    where the token carries loss (default: all).

    The importance ratio ``r = pi / pi_sampler`` has the *value* of the raw ratio (what the sampler's
    log-probs allow: 1 on-policy, up to numerics) and the *gradient* of the tempered policy,
    ``grad r = r * grad log pi_T``: ``r = exp(log pi_T - sg(log pi_T) + sg(log pi - log pi_sampler))``.
    At T = 1 this is ``exp(log pi - log pi_sampler)`` exactly.
    """
    shape = logp.shape
    named = {"entropy": entropy, "sampler_logp": sampler_logp, "advantages": advantages, "coefs": coefs,
             "raw_logp": raw_logp, "ref_logp": ref_logp, "mask": mask}
    for name, value in named.items():
        if value is not None and value.shape != shape:
            raise ValueError(f"token_loss: {name} has shape {tuple(value.shape)}, logp has {tuple(shape)}")
    mask = torch.ones_like(logp) if mask is None else mask.to(logp.dtype)
    raw_logp = logp if raw_logp is None else raw_logp

    log_ratio_raw = (raw_logp - sampler_logp).detach()
    ratio = torch.exp(logp - logp.detach() + log_ratio_raw)
    if cfg.policy_loss == "ppo_clip":
        clipped_ratio = ratio.clamp(1.0 - cfg.clip_eps, 1.0 + cfg.clip_eps)
        pg = -torch.minimum(ratio * advantages, clipped_ratio * advantages)
        clipped = (clipped_ratio * advantages < ratio * advantages).to(logp.dtype)  # the clipped branch taken
    else:  # Eq. 1: the score-function gradient A * grad log pi
        pg = -advantages * logp
        clipped = torch.zeros_like(logp)

    kl = torch.zeros_like(logp)
    if ref_logp is not None:
        delta = ref_logp - logp
        kl = torch.exp(delta) - delta - 1.0  # k3 estimator of KL(pi || pi_ref)

    per_token = pg + cfg.kl_coef * kl - cfg.entropy_coef * entropy
    # Eq. 5: sum_k w_k L_k, with w_k and the aggregation folded into each trajectory's coefficient.
    loss = (coefs * mask * per_token).sum()

    with torch.no_grad():
        ratio = ratio.detach()
        sums = torch.stack([
            (mask * pg).sum(), (mask * kl).sum(), (mask * entropy).sum(),
            (mask * (ratio - 1.0).abs()).sum(), (mask * clipped).sum(), mask.sum(),
        ]).double()
        ratio_max = (ratio * mask).max() if ratio.numel() else torch.zeros((), device=ratio.device)
    return TokenLoss(loss, sums, ratio_max.double().reshape(1))
