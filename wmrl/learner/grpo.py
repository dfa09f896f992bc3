"""The GRPO + WMRL policy update, top to bottom (paper §3, Eqs. 1 and 5; constants in Appendix D).

One call of :meth:`GRPOLearner.update` takes a step's groups, their advantages
``A_{k,i} = r_{k,i} - mean_j r_{k,j}`` (Eq. 1/2, computed by the step with true scores on anchor groups
and calibrated scores on world-model groups) and the per-group weights ``w_k`` of Eq. 5
(``rho/(rho|G_E|+|G_WM|)`` on anchor groups, ``1/(rho|G_E|+|G_WM|)`` on world-model groups; they sum to
1 over the trained groups, 0 = not trained), and descends the loss

    L = sum_k w_k * L_k,    L_k = agg_{i in group k, t generated} [ pg_{k,i,t} + beta * kl_t - c * H_t ]

- ``pg``: ``-A * log pi(token)`` (on-policy: the gradient of Eq. 1), or PPO's clipped surrogate;
- ``kl``: the k3 estimator of KL(pi || pi_ref) to the frozen initial policy, as GRPO uses it:
  ``exp(q - p) - (q - p) - 1`` with p, q the policy and reference log-probs of the token (>= 0,
  unbiased, zero gradient where pi = pi_ref);
- ``H``: the policy's full-vocabulary entropy at the position (the entropy *bonus*);
- ``agg``: ``learner.loss_agg`` (docs/learner.md says which one is Eq. 1).

The fused gradient of Eq. 5, ``(rho g_E + g_WM)/(rho|G_E|+|G_WM|)``, is then exactly ``grad L`` with
``g_k = -grad L_k``: the weights reach the gradient through the per-trajectory loss coefficients.
The coefficients and the per-token terms are pure functions (``wmrl/learner/loss.py``); the log-probs
and entropies come from the LM head run over the generated positions only, in chunks
(``wmrl/learner/head.py``).

Every step is on-policy (one update per batch of rollouts), so the importance ratio
``pi / pi_sampler`` is 1 up to sampler/learner numerics; it is computed against the sampler's
log-probs anyway and its deviation is logged, a detector for a sampler that drifted from the learner
(wrong temperature, stale weights after a failed sync, precision mismatch).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from wmrl.learner import batch as batching
from wmrl.learner import head
from wmrl.learner.checkpoint import load, save
from wmrl.learner.config import LearnerConfig
from wmrl.learner.distributed import all_reduce
from wmrl.learner.engine import HostPartitions, build_engines, offloadable_states
from wmrl.learner.loss import STAT_SUMS, loss_coefficients, token_loss
from wmrl.learner.memory import PeakMemory
from wmrl.learner.weights import flatten, gathered_buckets
from wmrl.rollout import Groups


class GRPOLearner:
    """The policy under DeepSpeed, updated by :meth:`update` (the ``Learner`` protocol of rollout.py).

    Every data-parallel rank constructs one and calls ``update`` with the same arguments; each rank
    forwards its share of the trajectories and DeepSpeed sums the gradients.
    """

    def __init__(self, cfg: LearnerConfig, model_path: str | Path) -> None:
        cfg.validate()
        self.cfg = cfg
        self.model_path = Path(model_path).resolve()  # the reference policy: frozen, never re-saved
        built = build_engines(cfg, self.model_path)
        self.engine, self.reference, self.device = built.engine, built.reference, built.device
        self.rank, self.world_size = built.rank, built.world_size
        self.pad_id = int(getattr(self.engine.module.config, "pad_token_id", None) or 0)
        self.updates = 0  # optimizer steps taken (restored by load_checkpoint)
        # The ZeRO-3 reference engine's partitions, moved by offload_states (Module.to moves nothing there).
        self.reference_partitions = HostPartitions(self.reference.module) \
            if self.reference is not None and cfg.zero_stage == 3 else None
        self._head_calls = 0  # LM-head calls per micro-batch in the current update (several ranks)

    # ------------------------------------------------------------------ the update
    def update(self, groups: Groups, advantages: np.ndarray, weights: np.ndarray) -> dict[str, float]:
        started = time.perf_counter()
        advantages, weights = _check_inputs(groups, advantages, weights)
        coefs = loss_coefficients(groups, weights, self.cfg.loss_agg, self.cfg.token_sum_norm)
        rows = [
            batching.Row.from_trajectory(traj, advantages[k, i], coefs[k][i])
            for k, group in enumerate(groups)
            for i, traj in enumerate(group)
            if coefs[k][i] > 0.0
        ]
        if not rows:  # nothing to train on: no optimizer step (AdamW would still move the weights)
            return {"learner/trajectories": 0.0, "learner/seconds": time.perf_counter() - started}
        mine = batching.micro_batches(
            batching.shard(rows, self.rank, self.world_size), self.cfg.micro_batch_size
        )
        # Every rank runs as many backward passes as the busiest one (ZeRO reduces inside backward).
        n_micro = int(all_reduce(torch.tensor([len(mine)], device=self.device), "max").item())
        self._head_calls = self._agreed_head_calls(mine)
        sums = torch.zeros(len(STAT_SUMS) + 1, dtype=torch.float64, device=self.device)
        ratio_max = torch.zeros(1, dtype=torch.float64, device=self.device)
        with PeakMemory(self.device) as memory:
            for j in range(n_micro):
                if j < len(mine):
                    loss, stats, rmax = self._micro_batch_loss(mine[j])
                    sums += stats
                    ratio_max = torch.maximum(ratio_max, rmax)
                else:
                    loss = self._idle_loss()
                # DeepSpeed averages gradients over ranks; the loss is a sum over all ranks' rows.
                self.engine.backward(loss * self.world_size, scale_wrt_gas=False)
            self.engine.step()
        self.updates += 1
        all_reduce(sums)
        all_reduce(ratio_max, "max")
        return self._metrics(sums, ratio_max, len(rows), n_micro, memory.peak_mb, started)

    def _micro_batch_loss(
        self, rows: list[batching.Row]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        cfg = self.cfg
        b = batching.collate(rows, self.pad_id, self.device)
        # Only the positions whose next token was generated carry loss: the LM head runs on those alone,
        # flattened to one row per loss token, chunk by chunk (wmrl/learner/head.py).
        where = b.target_mask.bool()
        targets = b.input_ids[:, 1:][where]
        n_chunks = self._head_calls
        hidden = head.final_hidden_states(self.engine, b.input_ids, b.attention_mask, where)
        policy = head.policy_tokens(
            head.output_head(self.engine), hidden, targets, cfg.temperature, cfg.loss_chunk_tokens, n_chunks
        )
        ref_logp = None
        if self.reference is not None:
            with torch.no_grad():
                ref_hidden = head.final_hidden_states(self.reference, b.input_ids, b.attention_mask, where)
                ref_logp = head.reference_log_probs(
                    head.output_head(self.reference), ref_hidden, targets, cfg.temperature,
                    cfg.loss_chunk_tokens, n_chunks,
                )
        # The generators return raw log-probs (before temperature, docs/models.md): the ratio's value
        # compares like with like, its gradient is the tempered policy's (wmrl/learner/loss.py).
        out = token_loss(
            policy.logp, policy.entropy, b.sampler_logprobs[where],
            b.advantages[:, None].expand_as(where)[where], b.coefs[:, None].expand_as(where)[where], cfg,
            raw_logp=policy.raw_logp, ref_logp=ref_logp,
        )
        stats = torch.cat([out.sums, out.loss.detach().double().reshape(1)])
        return out.loss + policy.padding, stats, out.ratio_max

    def _agreed_head_calls(self, micro_batches: list[list[batching.Row]]) -> int:
        """LM-head calls per micro-batch for this update, the same on every rank and in every micro-batch
        (0: as many as the micro-batch needs). Under ZeRO-3 each call gathers the head's weight, a
        collective every rank must join, and ZeRO-3's prefetch follows the modules' recorded order."""
        if self.world_size == 1:
            return 0
        positions = [sum(sum(row.loss_mask[1:]) for row in rows) for rows in micro_batches]
        local = max((head.chunk_count(n, self.cfg.loss_chunk_tokens) for n in positions), default=0)
        return int(all_reduce(torch.tensor([local], device=self.device), "max").item())

    def _idle_loss(self) -> torch.Tensor:
        """A zero loss for a rank with fewer micro-batches than the others, through the calls a busy
        micro-batch makes, in its order (model, head chunks, reference): ZeRO gathers and reduces in them."""
        cfg = self.cfg
        ids = torch.full((1, 2), self.pad_id, dtype=torch.long, device=self.device)
        mask, none = torch.ones_like(ids), torch.zeros((1, 1), dtype=torch.bool, device=self.device)
        n_chunks = self._head_calls
        hidden = head.final_hidden_states(self.engine, ids, mask, none)
        policy = head.policy_tokens(head.output_head(self.engine), hidden, ids[:, 1:][none], cfg.temperature,
                                    cfg.loss_chunk_tokens, n_chunks)
        if self.reference is not None and cfg.zero_stage == 3:
            with torch.no_grad():
                ref_hidden = head.final_hidden_states(self.reference, ids, mask, none)
                head.reference_log_probs(head.output_head(self.reference), ref_hidden, ids[:, 1:][none],
                                         cfg.temperature, cfg.loss_chunk_tokens, n_chunks)
        return policy.padding + hidden.sum() * 0.0

    def _metrics(
        self, sums: torch.Tensor, ratio_max: torch.Tensor, n_rows: int, n_micro: int,
        peak_mb: float, started: float,
    ) -> dict[str, float]:
        totals = dict(zip(STAT_SUMS, sums[:-1].tolist(), strict=True))
        tokens = max(totals["tokens"], 1.0)
        grad_norm = self.engine.get_global_grad_norm()
        return {
            "learner/loss": float(sums[-1]),
            "learner/pg_loss": totals["pg"] / tokens,
            "learner/kl": totals["kl"] / tokens,
            "learner/entropy": totals["entropy"] / tokens,
            "learner/ratio_mean_abs_dev": totals["ratio_dev"] / tokens,
            "learner/ratio_max": float(ratio_max),
            "learner/clip_frac": totals["clipped"] / tokens,
            "learner/grad_norm": float("nan") if grad_norm is None else float(grad_norm),
            "learner/lr": float(self.engine.get_lr()[0]),
            "learner/tokens": totals["tokens"],
            "learner/trajectories": float(n_rows),
            "learner/micro_batches": float(n_micro),
            "learner/seconds": time.perf_counter() - started,
            "learner/peak_memory_mb": peak_mb,
        }

    # ------------------------------------------------------------------ colocated placement
    def offload_states(self) -> None:
        """Move the model, its gradients and optimizer states (DeepSpeed's ``offload_states``, what it can
        move for this optimizer: engine.offloadable_states) and the reference model to host memory,
        freeing the GPU for a colocated vLLM (wmrl/generation/colocation.py)."""
        if not hasattr(self.engine.optimizer, "offload_states"):
            raise ValueError(f"generation.vllm.placement=colocated offloads the learner's states with DeepSpeed's "
                             f"offload_states, which needs learner.zero_stage >= 1 (got {self.cfg.zero_stage})")
        if self.cfg.offload_params:
            # DeepSpeed refuses to move offloaded parameters; with them the partitions live in host memory.
            raise ValueError("generation.vllm.placement=colocated cannot move the learner's states with "
                             "learner.offload_params=true (DeepSpeed's offload_states refuses offloaded "
                             "parameters): set it to false, or use placement=dedicated")
        self.engine.offload_states(include=offloadable_states(self.engine))
        if self.reference_partitions is not None:
            self.reference.empty_partition_cache()  # the gathered copies (persistent ones too) first
            self.reference_partitions.offload()
        elif self.reference is not None:
            self.reference.to("cpu")

    def reload_states(self) -> None:
        """Bring back what :meth:`offload_states` moved to host memory."""
        self.engine.reload_states()
        if self.reference_partitions is not None:
            self.reference_partitions.reload(self.device)
        elif self.reference is not None:
            self.reference.to(self.device)

    # ------------------------------------------------------------------ weights and checkpoints
    def weight_buckets(self, dtype: torch.dtype | None = None) -> Iterator[list[tuple[str, torch.Tensor]]]:
        """The policy's full parameters by Hugging Face name, ``learner.weight_sync_bucket_mb`` at a time,
        in ``dtype`` (the generator's); collective under ZeRO-3: every rank drains it
        (see wmrl/learner/weights.py)."""
        return gathered_buckets(self.engine.module, int(self.cfg.weight_sync_bucket_mb * 2**20), dtype)

    def named_parameters(self, dtype: torch.dtype | None = None) -> Iterator[tuple[str, torch.Tensor]]:
        """:meth:`weight_buckets` one tensor at a time, for ``Generator.update_weights``."""
        return flatten(self.weight_buckets(dtype))

    def save_checkpoint(self, root: str | Path, step: int) -> Path:
        """Checkpoint after step ``step`` under ``root`` (collective); see wmrl/learner/checkpoint.py."""
        return save(self, Path(root), step)

    def load_checkpoint(self, path: str | Path) -> int:
        """Restore model, optimizer and RNG from a checkpoint directory; returns its step."""
        return load(self, Path(path))


def _check_inputs(
    groups: Groups, advantages: np.ndarray, weights: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    advantages, weights = np.asarray(advantages, dtype=np.float64), np.asarray(weights, dtype=np.float64)
    sizes = {len(g) for g in groups}
    if len(sizes) > 1:
        raise ValueError(f"groups have different sizes {sorted(sizes)}; advantages need a (G, n) array")
    n = sizes.pop() if sizes else 0
    if advantages.shape != (len(groups), n):
        raise ValueError(f"advantages have shape {advantages.shape}, expected (G, n) = {(len(groups), n)}")
    if weights.shape != (len(groups),):
        raise ValueError(f"weights have shape {weights.shape}, expected (G,) = ({len(groups)},)")
    if not (np.all(np.isfinite(advantages)) and np.all(np.isfinite(weights)) and np.all(weights >= 0)):
        raise ValueError("advantages and weights must be finite and weights >= 0 (Eq. 5)")
    return advantages, weights
