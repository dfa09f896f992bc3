"""Config sections ``sampling`` (how tokens are drawn) and ``generation`` (which engine draws them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from wmrl.config_checks import ConfigError, Section, choice, in_range

if TYPE_CHECKING:  # loading a config must not import torch
    from wmrl.generation.base import SamplingParams

BACKENDS = ("transformers", "vllm")
DEVICES = ("auto", "cpu", "cuda")
WEIGHT_TRANSFER = ("auto", "ipc", "nccl")
PLACEMENTS = ("colocated", "dedicated")
SLEEP_LEVELS = (0, 1, 2)
VLLM_DTYPES = ("auto", "bfloat16", "float16", "float32")


@dataclass
class SamplingConfig(Section):
    """The policy's sampling settings (paper, Appendix D: temperature 1.0, top-p 1.0, 4096 tokens per turn)."""

    KEY: ClassVar[str] = "sampling"
    temperature: float = field(default=1.0, metadata=in_range(0.0))
    top_p: float = field(default=1.0, metadata=in_range(0.0, 1.0, low_open=True))
    # per turn; the tiny default's replies are a few hundred tokens
    max_new_tokens: int = field(default=512, metadata=in_range(1))
    seed: int = field(default=0, metadata=in_range(0))

    def params(self) -> SamplingParams:
        # torch: loading a config must not import it
        from wmrl.generation.base import SamplingParams

        return SamplingParams(self.temperature, self.top_p, self.max_new_tokens, self.seed)


@dataclass
class VLLMConfig(Section):
    """vLLM engine settings (``generation.backend=vllm``, GPU clusters; placements in docs/cluster.md)."""

    KEY: ClassVar[str] = "generation.vllm"
    # Where vLLM runs. "colocated": on the learner's GPU, taking turns with it: vLLM sleeps while the
    # learner trains and the learner's model and optimizer states wait in host memory while vLLM
    # generates (wmrl/generation/colocation.py). "dedicated": on the last `inference_gpus` GPUs of the
    # coordinator's allocation, the learner on the others; weights travel over NCCL.
    placement: str = field(default="colocated", metadata=choice(PLACEMENTS))
    # dedicated: GPUs of the allocation vLLM uses (>= tensor_parallel_size)
    inference_gpus: int = field(default=0, metadata=in_range(0))
    # colocated: vLLM's sleep level while the learner trains. 1: weights to host memory, KV cache freed;
    # 2: weights and KV cache freed (the weight update refills them); 0: never sleep (both must fit).
    sleep_level: int = field(default=1, metadata=choice(SLEEP_LEVELS))
    # How the learner's weights reach vLLM after each step: "ipc" when vLLM shares the learner's GPU
    # (CUDA IPC handles, no copy), "nccl" when it runs on other GPUs; "auto" picks by placement.
    weight_transfer: str = field(default="auto", metadata=choice(WEIGHT_TRANSFER))
    # The fraction of the GPU's TOTAL memory vLLM reserves (weights, activations, KV cache; what is left
    # of it after the weights is KV cache), not of its free memory: vLLM refuses to start when the GPU's
    # free memory is below it, so 0.4 of an A100-80GB needs 32 GB free (wmrl checks this up front, see
    # vllm_engine.check_gpu_memory). Colocated, the learner's states are in host memory by then.
    gpu_memory_utilization: float = field(default=0.4, metadata=in_range(0.0, 1.0, low_open=True))
    tensor_parallel_size: int = field(default=1, metadata=in_range(1))
    # prompt + all turns; the paper's world model reads 12k
    max_model_len: int = field(default=16384, metadata=in_range(16))
    dtype: str = field(default="bfloat16", metadata=choice(VLLM_DTYPES))
    enforce_eager: bool = False
    enable_prefix_caching: bool = True  # a group's n trajectories share their prompt

    def check_together(self, prefix: str) -> None:
        if self.weight_transfer == "ipc" and self.tensor_parallel_size > 1:
            raise ConfigError(f"{prefix}.weight_transfer=ipc needs {prefix}.tensor_parallel_size=1 (the learner's "
                              f"CUDA IPC handles are of its one GPU); use weight_transfer=nccl for tensor parallelism")
        self._check_placement(prefix)

    def _check_placement(self, prefix: str) -> None:
        if self.placement == "dedicated":
            if self.inference_gpus < self.tensor_parallel_size:
                raise ConfigError(f"{prefix}.placement=dedicated needs {prefix}.inference_gpus >= "
                                  f"{prefix}.tensor_parallel_size={self.tensor_parallel_size} (the GPUs of the "
                                  f"allocation vLLM runs on), got {prefix}.inference_gpus={self.inference_gpus}")
            if self.weight_transfer == "ipc":
                raise ConfigError(f"{prefix}.weight_transfer=ipc needs the learner and vLLM on one GPU; "
                                  f"{prefix}.placement=dedicated sends weights with weight_transfer=nccl (or auto)")
        elif self.inference_gpus:
            raise ConfigError(f"{prefix}.inference_gpus={self.inference_gpus} is only for placement=dedicated; "
                              f"{prefix}.placement=colocated runs vLLM on the learner's GPU (set it to 0)")


@dataclass
class GenerationConfig(Section):
    KEY: ClassVar[str] = "generation"
    # "transformers" (CPU, GPU fallback) or "vllm" (GPU, `gpu` extra)
    backend: str = field(default="transformers", metadata=choice(BACKENDS))
    # transformers backend: "auto" = cuda when available, else cpu
    device: str = field(default="auto", metadata=choice(DEVICES))
    batch_size: int = field(default=16, metadata=in_range(1))  # transformers backend: prompts decoded together
    # transformers backend with several learner ranks: every rank holds a copy and draws a share of each
    # call (wmrl/generation/data_parallel.py); otherwise rank 0 draws alone. The colocated vLLM placement
    # is data-parallel by itself (one engine per learner GPU).
    data_parallel: bool = False
    vllm: VLLMConfig = field(default_factory=VLLMConfig)

    def data_parallel_over(self, ranks: int) -> bool:
        """Whether each of ``ranks`` learner ranks holds an engine and draws a share of every call."""
        if ranks <= 1:
            return False
        return self.vllm.placement == "colocated" if self.backend == "vllm" else self.data_parallel

    def check_together(self, prefix: str) -> None:
        if self.data_parallel and self.backend == "vllm":
            raise ConfigError(f"{prefix}.data_parallel is for the transformers backend; vLLM is data-parallel "
                              f"with {prefix}.vllm.placement=colocated (one engine per learner GPU)")
