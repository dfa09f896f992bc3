"""Set-up of the learner's DeepSpeed engine and of the frozen reference policy.

The policy is a Hugging Face causal LM loaded from a model directory (config + weights); DeepSpeed
wraps it with a client ``torch.optim`` optimizer, so nothing is JIT-compiled (DeepSpeed's own
``FusedAdam``/``DeepSpeedCPUAdam`` would be), and the ZeRO stage comes from the config. Gradient
accumulation is *unmanaged* (``managed_gradient_accumulation: false``): the learner forwards as many
micro-batches as a step has and then calls ``engine.step()`` once, so the number of micro-batches
may change from step to step.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from wmrl.learner.config import LearnerConfig
from wmrl.learner.distributed import init_distributed
from wmrl.models.loading import load_causal_lm

DTYPES = {"fp32": "float32", "bf16": "bfloat16"}  # learner.precision -> wmrl.models.loading dtype


def deepspeed_config(cfg: LearnerConfig) -> dict[str, Any]:
    """The DeepSpeed JSON config for ``cfg`` (micro-batch size 1: the learner batches itself)."""
    return {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "managed_gradient_accumulation": False,
        "gradient_clipping": float(cfg.grad_clip),
        "zero_optimization": {"stage": cfg.zero_stage},
        "bf16": {"enabled": cfg.precision == "bf16"},
        # A client torch optimizer under ZeRO is supported by DeepSpeed but not on its tested list.
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 2**31 - 1,
        "wall_clock_breakdown": False,
    }


def _optimizer(cfg: LearnerConfig, params: Any) -> torch.optim.Optimizer:
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr)
    return torch.optim.AdamW(
        params, lr=cfg.lr, betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_eps,
        weight_decay=cfg.weight_decay,
    )


@dataclass
class Engines:
    engine: Any  # deepspeed.DeepSpeedEngine: .module is the policy
    reference: torch.nn.Module | None  # the frozen initial policy (None when kl_coef == 0)
    device: torch.device
    rank: int
    world_size: int


def build_engines(cfg: LearnerConfig, model_path: Path) -> Engines:
    """The policy under DeepSpeed and the reference model, on this rank's device."""
    rank, world_size = init_distributed()
    import deepspeed
    from deepspeed.accelerator import get_accelerator

    # The policy starts in fp32: under bf16 DeepSpeed casts the module and keeps fp32 master weights.
    policy = load_causal_lm(model_path, "float32")  # text model only, for vision-language checkpoints
    policy.config.use_cache = False
    if cfg.gradient_checkpointing:
        policy.gradient_checkpointing_enable()
    policy.train()  # dropout stays at the config's value (0 in Qwen3): identical to sampling
    engine, *_ = deepspeed.initialize(
        model=policy, optimizer=_optimizer(cfg, policy.parameters()), config=deepspeed_config(cfg)
    )
    device = torch.device(get_accelerator().device_name(engine.local_rank))
    reference = None
    if cfg.kl_coef > 0:
        reference = load_causal_lm(model_path, DTYPES[cfg.precision], device=str(device))
        reference.requires_grad_(False)
        reference.eval()
    return Engines(engine, reference, device, rank, world_size)
