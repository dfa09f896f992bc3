"""From a step's trajectories to padded micro-batches on one data-parallel rank.

A :class:`Row` is one trajectory as the loss needs it: its tokens, which of them were generated,
the sampler's log-probs, its advantage and its loss coefficient (Eq. 5 weight and aggregation,
computed in ``wmrl/learner/grpo.py``). Rows are dealt to ranks and cut into micro-batches here; the
sum of the coefficient-weighted token losses over every micro-batch of every rank is the step's loss,
whatever the split.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from wmrl.rollout import Trajectory


@dataclass(frozen=True)
class Row:
    token_ids: list[int]
    loss_mask: list[int]  # 1 on generated tokens
    logprobs: list[float]  # sampler log-probs, aligned with token_ids
    advantage: float
    coef: float  # this trajectory's share of the loss: sum_t coef * loss_t

    @classmethod
    def from_trajectory(cls, traj: Trajectory, advantage: float, coef: float) -> Row:
        ids, mask, lps = traj.token_ids(), traj.loss_mask(), traj.logprobs()
        where = f"trajectory (task {traj.task_id}, group {traj.group}, index {traj.index})"
        if not (len(ids) == len(mask) == len(lps)):
            raise ValueError(
                f"{where}: {len(ids)} token ids, {len(mask)} mask entries and {len(lps)} log-probs; "
                "every turn needs one sampler log-prob per generated token"
            )
        if mask and mask[0]:
            raise ValueError(f"{where}: the first token is marked generated; a trajectory starts with its prompt")
        return cls(ids, mask, lps, float(advantage), float(coef))

    @property
    def length(self) -> int:
        return len(self.token_ids)


def shard(rows: list[Row], rank: int, world_size: int) -> list[Row]:
    """This rank's rows: longest first, dealt round-robin, so ranks get similar token counts."""
    order = sorted(range(len(rows)), key=lambda i: (-rows[i].length, i))
    return [rows[i] for i in order[rank::world_size]]


def micro_batches(rows: list[Row], size: int) -> list[list[Row]]:
    """Consecutive chunks of ``size`` rows (rows arrive sorted by length: little padding)."""
    return [rows[i : i + size] for i in range(0, len(rows), size)]


@dataclass
class Tensors:
    input_ids: torch.Tensor  # (B, T) right-padded
    attention_mask: torch.Tensor  # (B, T)
    target_mask: torch.Tensor  # (B, T-1): 1 where token t+1 is generated (a loss position)
    sampler_logprobs: torch.Tensor  # (B, T-1): log-prob of token t+1 under the sampler
    advantages: torch.Tensor  # (B,)
    coefs: torch.Tensor  # (B,)


def collate(rows: list[Row], pad_id: int, device: torch.device) -> Tensors:
    """Right-padded tensors; the loss positions are shifted by one (logits at t predict token t+1)."""
    width = max(r.length for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(rows), width), dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.float32)
    lps = torch.zeros((len(rows), width), dtype=torch.float32)
    for i, row in enumerate(rows):
        ids[i, : row.length] = torch.tensor(row.token_ids, dtype=torch.long)
        attn[i, : row.length] = 1
        mask[i, : row.length] = torch.tensor(row.loss_mask, dtype=torch.float32)
        lps[i, : row.length] = torch.tensor(row.logprobs, dtype=torch.float32)
    return Tensors(
        input_ids=ids.to(device),
        attention_mask=attn.to(device),
        target_mask=mask[:, 1:].to(device),
        sampler_logprobs=lps[:, 1:].to(device),
        advantages=torch.tensor([r.advantage for r in rows], dtype=torch.float32, device=device),
        coefs=torch.tensor([r.coef for r in rows], dtype=torch.float32, device=device),
    )
