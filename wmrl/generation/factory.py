"""The generator a run uses, from its ``generation`` config section."""

from __future__ import annotations

from pathlib import Path

from wmrl.generation.base import Generator
from wmrl.generation.config import GenerationConfig
from wmrl.generation.hf import TransformersGenerator
from wmrl.generation.vllm_engine import VLLMGenerator


def build_generator(path: str | Path, cfg: GenerationConfig, dtype: str = "float32",
                    colocated: bool | None = None) -> Generator:
    """``transformers`` (CPU, or one GPU as a fallback) or ``vllm`` (GPU clusters, the ``gpu`` extra).

    ``colocated``: the learner trains on the GPU vLLM serves from (weights then travel by CUDA IPC);
    None = as ``generation.vllm.placement`` says.
    """
    if cfg.backend == "vllm":
        return VLLMGenerator(str(path), cfg.vllm, colocated=colocated)
    return TransformersGenerator.from_path(str(path), dtype=dtype, device=cfg.device, batch_size=cfg.batch_size)
