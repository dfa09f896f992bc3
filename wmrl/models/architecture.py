"""Model architectures as dimensions only: the shipped Qwen3.5 text configs and parameter counts.

``model.architecture`` names a shipped architecture (``wmrl/models/architectures/<name>/config.json``:
the text model's dimensions, no weights) or a path to such a ``config.json``. ``wmrl plan`` counts
its parameters on the meta device (nothing is allocated, no weights are read), and the GPU smoke
builds a random-init model of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wmrl.config_checks import ConfigError
from wmrl.models.loading import quiet_hf
from wmrl.models.vision_language import text_config

ARCHITECTURES_DIR = Path(__file__).resolve().parent / "architectures"
SHIPPED: tuple[str, ...] = ("qwen3.5-4b", "qwen3.5-9b")


def architecture_path(value: str, key: str = "model.architecture") -> Path:
    """The ``config.json`` that ``value`` names (a shipped name, a file, or a directory holding one)."""
    if value in SHIPPED:
        return ARCHITECTURES_DIR / value / "config.json"
    path = Path(value).expanduser()
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise ConfigError(f"{key}={value!r} is neither a shipped architecture ({', '.join(SHIPPED)}) "
                          "nor a path to a config.json (a model directory's, dimensions only)")
    return path


def load_text_config(path: str | Path) -> Any:
    """The causal LM's config in ``path`` (a config.json or its directory); the text config of a
    vision-language checkpoint."""
    from transformers import AutoConfig


    quiet_hf()
    path = Path(path)
    directory = path.parent if path.name == "config.json" else path
    return text_config(AutoConfig.from_pretrained(str(directory), local_files_only=True))


def meta_model(config: Any) -> Any:
    """The causal LM of ``config`` on the meta device: shapes only, no memory, no weights."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


@dataclass(frozen=True)
class ParameterCounts:
    total: int  # shared (tied) tensors once, as DeepSpeed's model_to_params counts them
    largest_layer: int  # most parameters held directly by one module (ZeRO-3 gathers one at a time)
    hidden_size: int
    num_layers: int
    vocab_size: int
    # Bytes of KV cache per token (full-attention layers only) and of recurrent state per sequence
    # (linear-attention layers: Gated DeltaNet state + causal-conv window), in 16-bit.
    kv_bytes_per_token: int
    state_bytes_per_sequence: int
    intermediate_size: int


def parameter_counts(config: Any) -> ParameterCounts:
    """Counts of a meta-device build of ``config`` (module structure as transformers builds it)."""
    model = meta_model(config)
    unique = {id(p): p.numel() for p in model.parameters()}
    largest = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
    layer_types = list(getattr(config, "layer_types", None) or ["full_attention"] * config.num_hidden_layers)
    full = sum(t == "full_attention" for t in layer_types)
    linear = len(layer_types) - full
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    kv_per_token = full * 2 * config.num_key_value_heads * head_dim * 2
    state = 0
    if linear:
        k_heads, v_heads = config.linear_num_key_heads, config.linear_num_value_heads
        k_dim, v_dim = config.linear_key_head_dim, config.linear_value_head_dim
        conv_channels = 2 * k_heads * k_dim + v_heads * v_dim
        state = linear * 2 * (v_heads * k_dim * v_dim + conv_channels * (config.linear_conv_kernel_dim - 1))
    return ParameterCounts(
        total=sum(unique.values()), largest_layer=largest, hidden_size=config.hidden_size,
        num_layers=len(layer_types), vocab_size=config.vocab_size, kv_bytes_per_token=kv_per_token,
        state_bytes_per_sequence=state, intermediate_size=config.intermediate_size,
    )
