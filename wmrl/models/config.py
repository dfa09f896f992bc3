"""Config section ``model``: which model the policy starts from, and the sizes of the tiny default."""

from __future__ import annotations

from dataclasses import dataclass, field

DTYPES = ("auto", "float32", "bfloat16", "float16")


@dataclass
class TinyModelConfig:
    """A small ``Qwen3ForCausalLM`` (pure attention) built by ``wmrl model init``, sized for 2 CPU cores."""

    vocab_size: int = 6144  # byte-level BPE on the pool's texts (~5k merges exist on the built-in pool)
    hidden_size: int = 256
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 64
    intermediate_size: int = 768
    max_position_embeddings: int = 4096
    rope_theta: float = 10000.0
    tie_word_embeddings: bool = True
    seed: int = 0

    def validate(self, prefix: str) -> None:
        from wmrl.config_checks import ConfigError, check_range

        # 256 byte symbols + 3 special tokens are always in the vocabulary.
        check_range(f"{prefix}.vocab_size", self.vocab_size, 512)
        for key in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim", "intermediate_size"):
            check_range(f"{prefix}.{key}", getattr(self, key), 1)
        check_range(f"{prefix}.max_position_embeddings", self.max_position_embeddings, 64)
        check_range(f"{prefix}.rope_theta", self.rope_theta, 0.0, low_open=True)
        if self.num_heads % self.num_kv_heads:
            raise ConfigError(
                f"{prefix}.num_heads={self.num_heads} must be a multiple of "
                f"{prefix}.num_kv_heads={self.num_kv_heads} (grouped-query attention)"
            )


@dataclass
class ModelConfig:
    # Local Hugging Face directory of the initial policy (a Qwen3.5 checkpoint on a cluster, any causal
    # LM). "" = the tiny default: `wmrl model init` then `wmrl sft`, both cached under cache_dir.
    path: str = ""
    # Weights dtype when loading; "auto" = the checkpoint's own (bfloat16 for Qwen3.5 releases).
    dtype: str = "float32"
    # Where built models and SFT outputs are cached; "" = $WMRL_CACHE, else ~/.cache/wmrl.
    cache_dir: str = ""
    # Dimensions only, for `wmrl plan` and random-init GPU smoke models: a shipped architecture
    # ("qwen3.5-4b", "qwen3.5-9b") or a path to a config.json. "" = model.path's own config.json.
    architecture: str = ""
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)

    def validate(self, prefix: str = "model") -> None:
        from wmrl.config_checks import check_choice

        check_choice(f"{prefix}.dtype", self.dtype, DTYPES)
        if self.architecture:
            from wmrl.models.architecture import architecture_path

            architecture_path(self.architecture, f"{prefix}.architecture")
        self.tiny.validate(f"{prefix}.tiny")
