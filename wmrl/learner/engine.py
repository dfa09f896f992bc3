"""Set-up of the learner's DeepSpeed engine and of the frozen reference policy.

The policy is a Hugging Face causal LM loaded from a model directory (config + weights); DeepSpeed
wraps it with a client optimizer (:func:`optimizer_kind`): torch's ``AdamW``/``SGD``, nothing
JIT-compiled, except at ZeRO-3 on GPUs with the optimizer on the GPU, where it is DeepSpeed's own
``FusedAdam`` (its CUDA op is JIT-built with nvcc on first use, cached in ``TORCH_EXTENSIONS_DIR``): ZeRO-3's
``offload_states``, which the colocated placement needs, moves the fp32 master weights and Adam states
only for that class (stage3.py asserts ``optimizer.__class__ == FusedAdam``). The ZeRO stage comes
from the config. Gradient
accumulation is *unmanaged* (``managed_gradient_accumulation: false``): the learner forwards as many
micro-batches as a step has and then calls ``engine.step()`` once, so the number of micro-batches
may change from step to step.

Where the memory goes (docs/learner.md, "Memory"):

- ZeRO-3 builds the model inside ``deepspeed.zero.Init`` (transformers does it when an
  ``HfDeepSpeedConfig`` is alive during ``from_pretrained``): each parameter is partitioned as soon as
  it is created, and only rank 0 reads the checkpoint's values, one module at a time, so no rank ever
  holds the whole model (rank 0 holds the checkpoint's tensors, memory-mapped, in their file dtype).
  The ``HfDeepSpeedConfig`` lives only during that load: while it exists, every ``from_pretrained``
  and ``generate`` in the process would go through ZeRO-3 (the generator's and world model's too).
- The reference policy is, at ZeRO-3, a second DeepSpeed engine without optimizer (an inference
  engine: partitioned, gathered layer by layer in its forward); below ZeRO-3 a plain copy in the
  learner's precision. It only ever computes log-probs under ``torch.no_grad``.
- ``offload_optimizer``/``offload_params`` move optimizer state / parameters to host memory with the
  *client* optimizer (``zero_force_ds_cpu_optimizer: false``: DeepSpeed otherwise insists on its
  ``DeepSpeedCPUAdam``, a JIT-compiled op that needs a matching nvcc).
- AdamW is torch's fused kernel where the device has one (CUDA, and CPU in torch >= 2.4, which is where
  the offloaded fp32 partitions live); otherwise the per-parameter loop (``foreach=False``): the
  ``foreach`` path stacks intermediate results for all parameters at once, a temporary as large as
  the optimizer's share of the model, exactly what offloading tries to keep off the host.
- ``data_types.grad_accum_dtype`` keeps the gradients accumulated over micro-batches in fp32.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from wmrl.learner.config import LearnerConfig
from wmrl.learner.cuda_driver import check_cuda_driver
from wmrl.learner.distributed import init_distributed
from wmrl.models.loading import load_causal_lm

DTYPES = {"fp32": "float32", "bf16": "bfloat16"}  # learner.precision -> wmrl.models.loading dtype


def _zero_section(cfg: LearnerConfig) -> dict[str, Any]:
    pin = torch.cuda.is_available()  # page-locked host buffers speed up GPU <-> host copies only
    zero: dict[str, Any] = {"stage": cfg.zero_stage}
    if cfg.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": pin}
    if cfg.offload_params:
        zero["offload_param"] = {"device": "cpu", "pin_memory": pin}
    if cfg.zero_stage == 3:
        zero["stage3_param_persistence_threshold"] = cfg.zero3_persistence_threshold
        # Checkpoints keep the partitions; export consolidates them (zero_to_fp32), not save time.
        zero["stage3_gather_16bit_weights_on_model_save"] = False
    return zero


def deepspeed_config(cfg: LearnerConfig) -> dict[str, Any]:
    """The DeepSpeed JSON config for ``cfg`` (micro-batch size 1: the learner batches itself)."""
    return {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "managed_gradient_accumulation": False,
        "gradient_clipping": float(cfg.grad_clip),
        "zero_optimization": _zero_section(cfg),
        "bf16": {"enabled": cfg.precision == "bf16"},
        "data_types": {"grad_accum_dtype": cfg.grad_accum_dtype},
        # A client torch optimizer under ZeRO is supported by DeepSpeed but not on its tested list,
        # and with ZeRO-Offload it is refused unless this is false (see the module docstring).
        "zero_allow_untested_optimizer": True,
        "zero_force_ds_cpu_optimizer": False,
        "steps_per_print": 2**31 - 1,
        "wall_clock_breakdown": False,
    }


def reference_config(cfg: LearnerConfig) -> dict[str, Any]:
    """The ZeRO-3 inference engine's config: partitioned parameters, no optimizer, no gradients."""
    zero: dict[str, Any] = {"stage": 3, "stage3_param_persistence_threshold": cfg.zero3_persistence_threshold}
    if cfg.offload_params:
        zero["offload_param"] = {"device": "cpu", "pin_memory": torch.cuda.is_available()}
    return {"train_micro_batch_size_per_gpu": 1, "zero_optimization": zero,
            "bf16": {"enabled": cfg.precision == "bf16"}, "steps_per_print": 2**31 - 1}


def _fused_adamw_supported(device_type: str) -> bool:
    from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

    return device_type in _get_fused_kernels_supported_devices()


def optimizer_kind(cfg: LearnerConfig, accelerator: str) -> str:
    """``sgd``, ``fused_adam`` (DeepSpeed's) or ``adamw`` (torch's) for ``cfg`` on ``accelerator``
    (DeepSpeed's accelerator name). DeepSpeed's ``FusedAdam`` only where ZeRO-3 keeps the optimizer on
    a GPU: ZeRO-3's ``offload_states`` moves master weights and Adam states for no other class, while
    under ZeRO-Offload DeepSpeed leaves those two out itself (they already live in host memory) and
    on a CPU there is no GPU memory to free and nothing should be compiled."""
    if cfg.optimizer == "sgd":
        return "sgd"
    if cfg.zero_stage == 3 and not cfg.offload_optimizer and accelerator == "cuda":
        return "fused_adam"
    return "adamw"


def _optimizer(cfg: LearnerConfig, params: Any, step_device: str, kind: str | None = None) -> torch.optim.Optimizer:
    """The client optimizer of ``kind`` (default: :func:`optimizer_kind` on ``step_device``);
    ``step_device`` is where its step runs (``cpu`` under ZeRO-Offload)."""
    kind = kind or optimizer_kind(cfg, step_device)
    if kind == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr)
    if kind == "fused_adam":
        from deepspeed.ops.adam import FusedAdam

        return FusedAdam(params, lr=cfg.lr, betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_eps,
                         weight_decay=cfg.weight_decay, adam_w_mode=True)  # adam_w_mode: AdamW's decoupled decay
    fused = _fused_adamw_supported(step_device)
    return torch.optim.AdamW(
        params, lr=cfg.lr, betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_eps,
        weight_decay=cfg.weight_decay, fused=fused or None, foreach=False if not fused else None,
    )


@contextlib.contextmanager
def zero3_loading(ds_config: dict[str, Any]) -> Iterator[None]:
    """While open, ``from_pretrained`` builds models inside ``deepspeed.zero.Init`` (partitioned)."""
    from transformers.integrations import HfDeepSpeedConfig
    from transformers.integrations.deepspeed import unset_hf_deepspeed_config

    keep_alive = HfDeepSpeedConfig(ds_config)  # transformers holds only a weak reference
    try:
        yield
    finally:
        unset_hf_deepspeed_config()
        del keep_alive


def _check_partitioned(model: torch.nn.Module, model_path: Path) -> None:
    """Every parameter came out of ``zero.Init`` (else a rank would have materialised the whole model)."""
    whole = [name for name, p in model.named_parameters() if not hasattr(p, "ds_id")]
    if whole:
        raise RuntimeError(f"{model_path}: {len(whole)} parameters ({', '.join(whole[:3])} ...) were built "
                           "outside deepspeed.zero.Init; the installed transformers no longer honours "
                           "HfDeepSpeedConfig in from_pretrained")


def offloadable_states(engine: Any) -> list[Any] | None:
    """What ``engine.offload_states(include=...)`` may move to host memory: everything (None), except at
    ZeRO-3 with a client optimizer other than DeepSpeed's ``FusedAdam`` (see :func:`optimizer_kind`),
    where stage3.py refuses the fp32 master weights and the optimizer states (``hp_params``,
    ``optim_states``): the bf16 partitions, the gradient partitions and the gradient bucket go, those two
    stay where the optimizer keeps them (host memory under ZeRO-Offload, the CPU on a CPU; with ``sgd`` on
    a GPU the fp32 master weights, 4 bytes per parameter / ranks, stay on the GPU)."""
    from deepspeed.ops.adam import FusedAdam
    from deepspeed.runtime.zero.offload_config import OffloadStateTypeEnum

    if engine.zero_optimization_stage() < 3 or type(engine.optimizer.optimizer) is FusedAdam:
        return None
    return [OffloadStateTypeEnum.lp_params, OffloadStateTypeEnum.lp_grads,
            OffloadStateTypeEnum.contiguous_grad_buffer]


class HostPartitions:
    """A ZeRO-3 module's parameter partitions (each parameter's ``ds_tensor``: this rank's share) moved to
    host memory and back, for the reference engine in the colocated placement.

    ``Module.to`` cannot do it: a partitioned parameter's ``.data`` is an empty placeholder and the
    partition an attribute, so ``.to("cpu")`` moves nothing; DeepSpeed's ``offload_states`` refuses an
    engine without optimizer. Each partition keeps its tensor object (DeepSpeed's gathers read it) and
    only its storage moves, into one flat host buffer (page-locked with CUDA) allocated once. The caller
    first releases the gathered copies (``engine.empty_partition_cache()``, as DeepSpeed's own
    ``offload_states`` does), including those ZeRO-3 keeps of parameters below
    ``zero3_persistence_threshold``; the next forward gathers them again.
    """

    def __init__(self, module: torch.nn.Module) -> None:
        params = list(module.parameters())
        self.partitions: list[torch.Tensor] = [p.ds_tensor for p in params]
        dtypes = {t.dtype for t in self.partitions}
        if len(dtypes) != 1:  # one flat buffer holds them all
            raise ValueError(f"the reference's partitions have several dtypes {sorted(map(str, dtypes))}")
        self.host: torch.Tensor | None = None

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.partitions)

    def offload(self) -> None:
        if self.host is None:
            self.host = torch.empty(sum(t.numel() for t in self.partitions), dtype=self.partitions[0].dtype,
                                    pin_memory=torch.cuda.is_available())
        offset = 0
        for tensor in self.partitions:
            view = self.host.narrow(0, offset, tensor.numel()).view(tensor.shape)
            view.copy_(tensor)
            tensor.data = view
            offset += tensor.numel()

    def reload(self, device: torch.device) -> None:
        for tensor in self.partitions:
            tensor.data = tensor.data.to(device, non_blocking=True, copy=True)  # copy: a new storage on a CPU too
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # the host buffer is overwritten by the next offload


@dataclass
class Engines:
    engine: Any  # deepspeed.DeepSpeedEngine: .module is the policy
    # The frozen initial policy (None when kl_coef == 0): a ZeRO-3 inference engine at zero_stage 3
    # (every rank must run its forward together), else a plain module.
    reference: Any
    device: torch.device
    rank: int
    world_size: int


def build_engines(cfg: LearnerConfig, model_path: Path) -> Engines:
    """The policy under DeepSpeed and the reference model, on this rank's device."""
    check_cuda_driver()  # before DeepSpeed, which would fall back to the CPU on a driver too old for torch
    rank, world_size = init_distributed()
    import deepspeed
    from deepspeed.accelerator import get_accelerator

    ds_config = deepspeed_config(cfg)
    zero3 = cfg.zero_stage == 3
    # The policy starts in fp32: under bf16 DeepSpeed casts the module (zero.Init partitions it in bf16)
    # and keeps fp32 master weights.
    with zero3_loading(ds_config) if zero3 else contextlib.nullcontext():
        policy = load_causal_lm(model_path, "float32", device=None if zero3 else "cpu")
    if zero3:
        _check_partitioned(policy, model_path)
    policy.config.use_cache = False
    if cfg.gradient_checkpointing:
        policy.gradient_checkpointing_enable()
    policy.train()  # dropout stays at the config's value (0 in Qwen3): identical to sampling
    step_device = "cpu" if cfg.offload_optimizer else get_accelerator().device_name()
    kind = optimizer_kind(cfg, get_accelerator().device_name())
    engine, *_ = deepspeed.initialize(
        model=policy, optimizer=_optimizer(cfg, policy.parameters(), step_device, kind), config=ds_config
    )
    device = torch.device(get_accelerator().device_name(engine.local_rank))
    reference = None
    if cfg.kl_coef > 0 and zero3:
        ref_config = reference_config(cfg)
        with zero3_loading(ref_config):
            module = load_causal_lm(model_path, DTYPES[cfg.precision], device=None)
        _check_partitioned(module, model_path)
        module.requires_grad_(False)
        reference, *_ = deepspeed.initialize(model=module, config=ref_config)
        reference.eval()
    elif cfg.kl_coef > 0:
        reference = load_causal_lm(model_path, DTYPES[cfg.precision], device=str(device))
        reference.requires_grad_(False)
        reference.eval()
    return Engines(engine, reference, device, rank, world_size)
