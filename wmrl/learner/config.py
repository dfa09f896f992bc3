"""Config section ``learner``: the GRPO + WMRL update and its DeepSpeed engine (paper Appendix D)."""

from __future__ import annotations

from dataclasses import dataclass

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
GRAD_ACCUM_DTYPES: tuple[str, ...] = ("fp32", "bf16")  # dtype gradients are accumulated in (bf16 precision)


@dataclass
class LearnerConfig:
    # Constant learning rate (Appendix D: 1e-6 at 4B/9B; a tiny random-init model needs far more).
    lr: float = 1e-6
    # Coefficient of the KL penalty to the frozen initial policy (k3 estimator); 0 = no reference model.
    kl_coef: float = 0.04
    # Coefficient of the entropy bonus (full-vocabulary entropy at generated positions).
    entropy_coef: float = 0.002
    # Gradient clipping on the global L2 norm; 0 = off.
    grad_clip: float = 1.0
    optimizer: str = "adamw"
    weight_decay: float = 0.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-8
    loss_agg: str = "seq-mean-token-mean"
    # Dr. GRPO's constant divisor of a trajectory's token sum: the generation budget of one
    # trajectory (paper: 4 turns x 4096 new tokens). Used only by loss_agg=seq-mean-token-sum-norm.
    token_sum_norm: int = 16384
    policy_loss: str = "on_policy"
    clip_eps: float = 0.2  # PPO clip range, policy_loss=ppo_clip only
    # The policy is the tempered softmax(logits / temperature) the sampler drew from: set it to the
    # sampling temperature. (The importance ratio uses raw log-probs, as the generators report them.)
    temperature: float = 1.0
    # Trajectories per forward/backward on one rank; a step's groups are accumulated over micro-batches.
    micro_batch_size: int = 2
    zero_stage: int = 2
    precision: str = "fp32"
    gradient_checkpointing: bool = False
    # ZeRO-Offload: the optimizer state (and, ZeRO-3 only, the parameters) live in host memory.
    offload_optimizer: bool = False
    offload_params: bool = False
    grad_accum_dtype: str = "fp32"
    # Generated positions whose log-prob and entropy are computed together: the loss head's peak
    # memory grows with loss_chunk_tokens x vocabulary, not with the sequence length.
    loss_chunk_tokens: int = 4096
    # Learner checkpoints kept under checkpoints/learner/ (the newest K complete ones).
    keep_checkpoints: int = 2

    def validate(self, prefix: str = "learner") -> None:
        from wmrl.config_checks import ConfigError, check_choice, check_range

        check_range(f"{prefix}.lr", self.lr, 0.0, low_open=True)
        check_range(f"{prefix}.kl_coef", self.kl_coef, 0.0)
        check_range(f"{prefix}.entropy_coef", self.entropy_coef, 0.0)
        check_range(f"{prefix}.grad_clip", self.grad_clip, 0.0)
        check_choice(f"{prefix}.optimizer", self.optimizer, OPTIMIZERS)
        check_range(f"{prefix}.weight_decay", self.weight_decay, 0.0)
        check_range(f"{prefix}.adam_beta1", self.adam_beta1, 0.0, 1.0, high_open=True)
        check_range(f"{prefix}.adam_beta2", self.adam_beta2, 0.0, 1.0, high_open=True)
        check_range(f"{prefix}.adam_eps", self.adam_eps, 0.0, low_open=True)
        check_choice(f"{prefix}.loss_agg", self.loss_agg, LOSS_AGGREGATIONS)
        check_range(f"{prefix}.token_sum_norm", self.token_sum_norm, 1)
        check_choice(f"{prefix}.policy_loss", self.policy_loss, POLICY_LOSSES)
        check_range(f"{prefix}.clip_eps", self.clip_eps, 0.0, 1.0, low_open=True, high_open=True)
        check_range(f"{prefix}.temperature", self.temperature, 0.0, low_open=True)
        check_range(f"{prefix}.micro_batch_size", self.micro_batch_size, 1)
        check_choice(f"{prefix}.zero_stage", self.zero_stage, (0, 1, 2, 3))
        check_choice(f"{prefix}.precision", self.precision, PRECISIONS)
        check_choice(f"{prefix}.grad_accum_dtype", self.grad_accum_dtype, GRAD_ACCUM_DTYPES)
        check_range(f"{prefix}.loss_chunk_tokens", self.loss_chunk_tokens, 1)
        if self.offload_params and self.zero_stage != 3:
            raise ConfigError(f"{prefix}.offload_params=true needs {prefix}.zero_stage=3 "
                              f"(got {self.zero_stage}): DeepSpeed offloads parameters under ZeRO-3 only")
        if self.offload_optimizer and self.zero_stage == 0:
            raise ConfigError(f"{prefix}.offload_optimizer=true needs {prefix}.zero_stage >= 1 (ZeRO-Offload)")
        check_range(f"{prefix}.keep_checkpoints", self.keep_checkpoints, 1)
        if self.optimizer == "sgd" and self.weight_decay > 0:
            raise ConfigError(f"{prefix}.weight_decay={self.weight_decay} needs {prefix}.optimizer=adamw")
