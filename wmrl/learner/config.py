"""Config section ``learner``: the GRPO + WMRL update and its DeepSpeed engine (paper Appendix D)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from wmrl.config_checks import ConfigError, Section, choice, in_range

# How the per-token loss terms of one trajectory and of one group are summed into the group's loss.
# See docs/learner.md for which one is the paper's Eq. 1.
LOSS_AGGREGATIONS: tuple[str, ...] = (
    "seq-mean-token-mean",  # mean over the group's trajectories of each trajectory's token mean (GRPO)
    "token-mean",  # mean over all generated tokens of the group (DAPO, applied per group)
    "seq-mean-token-sum-norm",  # mean over trajectories of token sums / token_sum_norm (Dr. GRPO)
)
POLICY_LOSSES: tuple[str, ...] = (
    "on_policy",  # -A * log pi: one update per step, the importance ratio is only logged
    "ppo_clip",  # -min(r A, clip(r, 1-eps, 1+eps) A) with r = pi / pi_sampler
)
OPTIMIZERS: tuple[str, ...] = ("adamw", "sgd")  # sgd: plain, for linearity checks and ablations
PRECISIONS: tuple[str, ...] = ("fp32", "bf16")  # bf16: GPU; DeepSpeed keeps fp32 master weights
GRAD_ACCUM_DTYPES: tuple[str, ...] = ("fp32", "bf16")  # DeepSpeed's data_types.grad_accum_dtype
ZERO_STAGES: tuple[int, ...] = (0, 1, 2, 3)


@dataclass
class LearnerConfig(Section):
    KEY: ClassVar[str] = "learner"
    # Constant learning rate (Appendix D: 1e-6 at 4B/9B; a tiny random-init model needs far more).
    lr: float = field(default=1e-6, metadata=in_range(0.0, low_open=True))
    # Coefficient of the KL penalty to the frozen initial policy (k3 estimator); 0 = no reference model.
    kl_coef: float = field(default=0.04, metadata=in_range(0.0))
    # Coefficient of the entropy bonus (full-vocabulary entropy at generated positions).
    entropy_coef: float = field(default=0.002, metadata=in_range(0.0))
    # Gradient clipping on the global L2 norm; 0 = off.
    grad_clip: float = field(default=1.0, metadata=in_range(0.0))
    optimizer: str = field(default="adamw", metadata=choice(OPTIMIZERS))
    weight_decay: float = field(default=0.0, metadata=in_range(0.0))
    adam_beta1: float = field(default=0.9, metadata=in_range(0.0, 1.0, high_open=True))
    adam_beta2: float = field(default=0.999, metadata=in_range(0.0, 1.0, high_open=True))
    adam_eps: float = field(default=1e-8, metadata=in_range(0.0, low_open=True))
    loss_agg: str = field(default="seq-mean-token-mean", metadata=choice(LOSS_AGGREGATIONS))
    # Dr. GRPO's constant divisor of a trajectory's token sum: the generation budget of one
    # trajectory (paper: 4 turns x 4096 new tokens). Used only by loss_agg=seq-mean-token-sum-norm.
    token_sum_norm: int = field(default=16384, metadata=in_range(1))
    policy_loss: str = field(default="on_policy", metadata=choice(POLICY_LOSSES))
    # PPO clip range, policy_loss=ppo_clip only
    clip_eps: float = field(default=0.2, metadata=in_range(0.0, 1.0, low_open=True, high_open=True))
    # The policy is the tempered softmax(logits / temperature) the sampler drew from: set it to the
    # sampling temperature. (The importance ratio's value uses raw log-probs, as the generators report
    # them; its gradient is the tempered policy's.)
    temperature: float = field(default=1.0, metadata=in_range(0.0, low_open=True))
    # Loss positions per chunk of the LM head (policy and reference): the head's peak memory grows
    # with loss_chunk_tokens x vocabulary, not with the sequence (wmrl/learner/head.py).
    loss_chunk_tokens: int = field(default=4096, metadata=in_range(1))
    # Trajectories per forward/backward on one rank; a step's groups are accumulated over micro-batches.
    micro_batch_size: int = field(default=2, metadata=in_range(1))
    # ZeRO stage (0-3). At 3 the policy is partitioned as it loads (deepspeed.zero.Init: no rank ever
    # holds the whole model) and the reference policy is a ZeRO-3 inference engine (docs/learner.md).
    zero_stage: int = field(default=2, metadata=choice(ZERO_STAGES))
    precision: str = field(default="fp32", metadata=choice(PRECISIONS))
    # Recompute each layer's activations in the backward pass (transformers' gradient checkpointing).
    gradient_checkpointing: bool = False
    # ZeRO-Offload: the fp32 master weights and optimizer state live in host memory and the optimizer
    # steps there (the client torch optimizer, no DeepSpeedCPUAdam JIT build); zero_stage >= 1.
    offload_optimizer: bool = False
    # ZeRO-Infinity's parameter offload: the partitioned parameters live in host memory between uses;
    # zero_stage 3 only (the reference engine offloads its parameters too).
    offload_params: bool = False
    # Precision of the gradients accumulated over a step's micro-batches (fp32 with bf16 weights: many
    # micro-batches do not lose the small ones to bf16 rounding). bf16 needs precision=bf16.
    grad_accum_dtype: str = field(default="fp32", metadata=choice(GRAD_ACCUM_DTYPES))
    # ZeRO-3 keeps parameters with fewer elements than this whole on every rank (DeepSpeed's
    # stage3_param_persistence_threshold: norms and biases are not worth an all-gather); 0 partitions all.
    zero3_persistence_threshold: int = field(default=100_000, metadata=in_range(0))
    # Weight sync from the learner to the generator gathers ZeRO-3 parameters this many MB at a time
    # (every rank joins each gather) and streams them bucket by bucket.
    weight_sync_bucket_mb: float = field(default=512.0, metadata=in_range(0.0, low_open=True))
    # Learner checkpoints kept under checkpoints/learner/ (the newest K complete ones).
    keep_checkpoints: int = field(default=2, metadata=in_range(1))

    def check_together(self, prefix: str) -> None:
        if self.offload_optimizer and self.zero_stage < 1:
            raise ConfigError(f"{prefix}.offload_optimizer=true needs {prefix}.zero_stage 1, 2 or 3 "
                              f"(got {self.zero_stage}): ZeRO-Offload moves the partitioned optimizer state")
        if self.offload_params and self.zero_stage != 3:
            raise ConfigError(f"{prefix}.offload_params=true needs {prefix}.zero_stage=3 (got {self.zero_stage}): "
                              "only ZeRO-3 partitions the parameters it would offload")
        if self.grad_accum_dtype == "fp32" and self.precision == "bf16" and self.zero_stage == 0:
            raise ConfigError(f"{prefix}.grad_accum_dtype=fp32 with {prefix}.precision=bf16 needs "
                              f"{prefix}.zero_stage >= 1 (DeepSpeed accumulates bf16 weights' gradients in "
                              "fp32 only under ZeRO); raise zero_stage or set grad_accum_dtype=bf16")
        if self.grad_accum_dtype == "bf16" and self.precision != "bf16":
            raise ConfigError(f"{prefix}.grad_accum_dtype=bf16 needs {prefix}.precision=bf16 (got "
                              f"{self.precision!r}); use grad_accum_dtype=fp32")
        if self.optimizer == "sgd" and self.weight_decay > 0:
            raise ConfigError(f"{prefix}.weight_decay={self.weight_decay} needs {prefix}.optimizer=adamw")
