"""Config section ``model``: which model the policy starts from, and the sizes of the tiny default."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from wmrl.config_checks import ConfigError, Section, choice, in_range

DTYPES = ("auto", "float32", "bfloat16", "float16")


@dataclass
class TinyModelConfig(Section):
    """A small ``Qwen3ForCausalLM`` (pure attention) built by ``wmrl model init``, sized for 2 CPU cores."""

    KEY: ClassVar[str] = "model.tiny"
    # byte-level BPE on the pool's texts (~5k merges exist on the built-in pool); at least the 256 byte
    # symbols and the 3 special tokens that are always in the vocabulary
    vocab_size: int = field(default=6144, metadata=in_range(512))
    hidden_size: int = field(default=256, metadata=in_range(1))
    num_layers: int = field(default=4, metadata=in_range(1))
    num_heads: int = field(default=4, metadata=in_range(1))
    num_kv_heads: int = field(default=2, metadata=in_range(1))
    head_dim: int = field(default=64, metadata=in_range(1))
    intermediate_size: int = field(default=768, metadata=in_range(1))
    max_position_embeddings: int = field(default=4096, metadata=in_range(64))
    rope_theta: float = field(default=10000.0, metadata=in_range(0.0, low_open=True))
    tie_word_embeddings: bool = True
    seed: int = 0

    def check_together(self, prefix: str) -> None:
        if self.num_heads % self.num_kv_heads:
            raise ConfigError(
                f"{prefix}.num_heads={self.num_heads} must be a multiple of "
                f"{prefix}.num_kv_heads={self.num_kv_heads} (grouped-query attention)"
            )


@dataclass
class ModelConfig(Section):
    KEY: ClassVar[str] = "model"
    # Local Hugging Face directory of the initial policy (a Qwen3.5 checkpoint on a cluster, any causal
    # LM). "" = the tiny default: `wmrl model init` then `wmrl sft`, both cached under cache_dir.
    path: str = ""
    # Weights dtype when loading; "auto" = the checkpoint's own (bfloat16 for Qwen3.5 releases).
    dtype: str = field(default="float32", metadata=choice(DTYPES))
    # Where built models and SFT outputs are cached; "" = $WMRL_CACHE, else ~/.cache/wmrl.
    cache_dir: str = ""
    # Dimensions only, for `wmrl plan` and random-init GPU smoke models: a shipped architecture
    # ("qwen3.5-4b", "qwen3.5-9b") or a path to a config.json. "" = model.path's own config.json.
    architecture: str = ""
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)

    def check_together(self, prefix: str) -> None:
        if self.architecture:
            # a config section imports no other package at load time (the shipped architectures' files)
            from wmrl.models.architecture import architecture_path

            architecture_path(self.architecture, f"{prefix}.architecture")
