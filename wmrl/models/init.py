"""``wmrl model init``: a tiny Qwen3 model (pure attention) with a locally trained tokenizer.

The result is a normal Hugging Face directory (``config.json``, ``model.safetensors``,
``generation_config.json``, ``tokenizer.json``, ``tokenizer_config.json``) that transformers, vLLM and
``transformers serve`` load. It is a function of the ``model.tiny`` sizes, the seed, the tokenizer
corpus and the library versions, and is cached under a hash of exactly those.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from wmrl.models.cache import build_once, cache_root, content_hash
from wmrl.models.config import ModelConfig, TinyModelConfig
from wmrl.models.corpus import corpus_digest, prompt_texts, tokenizer_corpus
from wmrl.models.loading import quiet_hf
from wmrl.tasks.config import TasksConfig
from wmrl.tasks.pool import resolve_pool_root

RECIPE = "qwen3-tiny-v1"  # bump when the build below changes what it writes


def _versions() -> dict[str, str]:
    import tokenizers
    import torch
    import transformers

    # Random init and BPE merges may change across releases; a new version gets a new cache entry.
    return {"torch": torch.__version__, "transformers": transformers.__version__, "tokenizers": tokenizers.__version__}


def tiny_model_hash(tiny: TinyModelConfig, corpus: Sequence[str]) -> str:
    return content_hash(
        {"recipe": RECIPE, "tiny": dataclasses.asdict(tiny), "corpus": corpus_digest(corpus), "versions": _versions()}
    )


def qwen3_config(tiny: TinyModelConfig, tokenizer: Any) -> Any:
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=tiny.vocab_size,
        hidden_size=tiny.hidden_size,
        intermediate_size=tiny.intermediate_size,
        num_hidden_layers=tiny.num_layers,
        num_attention_heads=tiny.num_heads,
        num_key_value_heads=tiny.num_kv_heads,
        head_dim=tiny.head_dim,
        max_position_embeddings=tiny.max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": tiny.rope_theta},
        tie_word_embeddings=tiny.tie_word_embeddings,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        dtype="float32",
    )


def write_tiny_model(out: Path, tiny: TinyModelConfig, corpus: Sequence[str]) -> dict[str, Any]:
    """Train the tokenizer, build the randomly initialised model, save both into ``out``."""
    import torch
    from transformers import GenerationConfig, Qwen3ForCausalLM

    # transformers and tokenizers, only when a tiny model is built
    from wmrl.models.tokenizer import ENDOFTEXT, save_tokenizer, train_bpe, wrap_hf

    quiet_hf()
    start = time.monotonic()
    hf_tok = wrap_hf(train_bpe(corpus, tiny.vocab_size), tiny.max_position_embeddings)
    if len(hf_tok) > tiny.vocab_size:  # cannot happen with the trainer's cap; guards a library change
        raise RuntimeError(f"tokenizer has {len(hf_tok)} tokens > model.tiny.vocab_size={tiny.vocab_size}")
    config = qwen3_config(tiny, hf_tok)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(tiny.seed)
        model = Qwen3ForCausalLM(config)
    model.generation_config = GenerationConfig(
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
        eos_token_id=[hf_tok.eos_token_id, hf_tok.convert_tokens_to_ids(ENDOFTEXT)],
        pad_token_id=hf_tok.pad_token_id,
    )
    model.save_pretrained(str(out))
    save_tokenizer(hf_tok, out)
    return {
        "recipe": RECIPE,
        "parameters": sum(p.numel() for p in model.parameters()),
        "tokenizer_vocab": len(hf_tok),
        "corpus_texts": len(corpus),
        "corpus_chars": sum(len(t) for t in corpus),
        "seconds": round(time.monotonic() - start, 3),
        "versions": _versions(),
    }


def default_tiny_dir(cfg: ModelConfig, digest: str) -> Path:
    return cache_root(cfg.cache_dir) / "models" / f"{RECIPE}-{digest[:16]}"


def init_tiny_model(cfg: ModelConfig, corpus: Sequence[str], out: Path | None = None) -> tuple[Path, bool]:
    """Build (or find in the cache) the tiny model; returns ``(directory, built_now)``."""
    digest = tiny_model_hash(cfg.tiny, corpus)
    target = Path(out) if out is not None else default_tiny_dir(cfg, digest)
    return build_once(target, digest, lambda tmp: write_tiny_model(tmp, cfg.tiny, corpus))


def pool_root_for(tasks_root: TasksConfig | str) -> Path:
    """``tasks.root`` as given, else the pool ``tasks.pool`` names (the built-in one, ~2 min to build on first
    use, or the task families); a bare root string means the built-in pool when empty."""
    return resolve_pool_root(tasks_root, progress=True)


def ensure_tiny_model(cfg: ModelConfig, tasks_root: TasksConfig | str = "", out: Path | None = None
                      ) -> tuple[Path, bool]:
    """The tiny model for this config and pool: from the cache, or built now (seconds)."""
    corpus = tokenizer_corpus(pool_root_for(tasks_root), prompt_texts())
    return init_tiny_model(cfg, corpus, out)
