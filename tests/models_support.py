"""Fixtures for the model tests: a tiny model built by the real ``wmrl model init`` code on a small
fixed corpus (seconds, no pool needed), and small SFT example lists."""

from __future__ import annotations

from pathlib import Path

from wmrl.models.config import ModelConfig, TinyModelConfig
from wmrl.models.corpus import GENERIC_TEXT

CORPUS = [GENERIC_TEXT, "import pandas as pd\nfrom sklearn.svm import SVC\nmodel = SVC(C=1.0)\n" * 3]
TINY = TinyModelConfig(vocab_size=700, hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, head_dim=16,
                       intermediate_size=64, max_position_embeddings=1024)


def tiny_config(cache_dir: Path, **changes) -> ModelConfig:
    from dataclasses import replace

    return ModelConfig(cache_dir=str(cache_dir), tiny=replace(TINY, **changes))


def build_tiny(cache_dir: Path, out: Path | None = None, **changes) -> Path:
    from wmrl.models.init import init_tiny_model

    return init_tiny_model(tiny_config(cache_dir, **changes), CORPUS, out)[0]


def chat_examples(tokenizer, tasks=("iris", "wine", "digits"), replies=3, kind="agent"):
    """Per task one shared prompt and ``replies`` different targets ending in <|im_end|>."""
    from wmrl.sft.example import SFTExample

    out = []
    for task in tasks:
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": f"Solve the task {task}."}],
                                               add_generation_prompt=True, tokenize=False)
        prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
        for k in range(replies):
            reply = f"I fit model {k} on {task}.\n```python\nprint({k})\n```<|im_end|>"
            out.append(SFTExample(prompt_ids, tokenizer.encode(reply, add_special_tokens=False), kind))
    return out
