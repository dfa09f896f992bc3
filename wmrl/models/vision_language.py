"""Vision-language checkpoints (the released Qwen3.5): which tensors are the text model's, by name.

A released Qwen3.5 checkpoint is a ``Qwen3_5ForConditionalGeneration``: ``model.language_model.*``
(the text model), ``lm_head.*``, ``model.visual.*`` (the vision tower) and ``mtp.*`` (a multi-token
prediction head). wmrl trains, syncs and serves the text model only, under two naming schemes:

- the learner holds ``Qwen3_5ForCausalLM`` built on the checkpoint's ``text_config``: ``model.*`` and
  ``lm_head.*`` (transformers renames ``model.language_model.`` to ``model.`` as it loads:
  ``transformers/conversion_mapping.py``, ``"qwen3_5_text": PrefixChange``);
- vLLM serves the checkpoint itself and its ``load_weights``, which the weight sync calls, takes the
  checkpoint's names (vLLM 0.33 ``model_executor/models/qwen3_vl.py`` 1969-1975:
  ``model.language_model.`` -> ``language_model.model.``, ``lm_head.`` -> ``language_model.lm_head.``;
  ``qwen3_5.py`` 476-479 drops ``mtp.``).

:func:`text_name` and :func:`checkpoint_name` are that one rule, both ways. :func:`name_problems` checks
a loaded model against the checkpoint's tensor names: under ZeRO-3, transformers reports no unexpected
key at all (``modeling_utils.py``: "we assume only best-case scenario with deepspeed, i.e. perfectly
matching checkpoints"), and elsewhere it only logs missing and unexpected keys, so a tensor the model
did not take would train from its random init without a word.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

TEXT_PREFIX = "model.language_model."  # the text model inside a vision-language checkpoint
# Tensors of a vision-language checkpoint that are not the text model: the vision tower and the
# multi-token-prediction head (neither the learner nor wmrl's vLLM engine loads them).
NOT_TEXT_PREFIXES = ("model.visual.", "mtp.")


def text_config(config: Any) -> Any:
    """The language model's config: ``config.text_config`` for composite (vision-language) checkpoints."""
    sub = getattr(config, "text_config", None)
    return sub if sub is not None and getattr(config, "model_type", "") != getattr(sub, "model_type", "") else config


def is_composite(config: Any) -> bool:
    """A vision-language config: its ``text_config`` is a model of its own (see :func:`text_config`)."""
    return text_config(config) is not config


def is_composite_dir(path: str | Path) -> bool:
    from transformers import AutoConfig

    return is_composite(AutoConfig.from_pretrained(str(path), local_files_only=True))


def text_name(name: str, composite: bool) -> str | None:
    """The learner's name of checkpoint tensor ``name``; None for a vision-tower or MTP tensor."""
    if not composite:
        return name
    if name.startswith(NOT_TEXT_PREFIXES):
        return None
    if name.startswith(TEXT_PREFIX):
        return "model." + name.removeprefix(TEXT_PREFIX)
    return name  # lm_head.* is at the top level in both


def checkpoint_name(name: str, composite: bool) -> str:
    """The checkpoint's (and vLLM's ``load_weights``') name of the learner's parameter ``name``."""
    if composite and name.startswith("model.") and not name.startswith(TEXT_PREFIX):
        return TEXT_PREFIX + name.removeprefix("model.")
    return name


def checkpoint_tensor_names(directory: str | Path) -> list[str]:
    """The tensor names a model directory holds, from the safetensors headers or the shard index
    (no tensor is read)."""
    directory = Path(directory)
    for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        if (directory / index).is_file():
            return sorted(json.loads((directory / index).read_text())["weight_map"])
    files = sorted(directory.glob("*.safetensors"))
    if files:
        from safetensors import safe_open

        names: list[str] = []
        for path in files:
            with safe_open(str(path), framework="pt") as handle:
                names.extend(handle.keys())
        return sorted(names)
    if (directory / "pytorch_model.bin").is_file():
        import torch

        state = torch.load(directory / "pytorch_model.bin", map_location="cpu", mmap=True, weights_only=True)
        return sorted(state)
    raise FileNotFoundError(f"{directory}: no *.safetensors, model.safetensors.index.json or pytorch_model.bin")


def _state_aliases(model: Any) -> list[list[str]]:
    """The names of each tensor ``model.state_dict()`` holds: a tied tensor has several."""
    groups: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(param), []).append(name)
    for module_name, module in model.named_modules(remove_duplicate=False):
        for name, buffer in module.named_buffers(recurse=False):
            if buffer is not None and name not in module._non_persistent_buffers_set:
                groups.setdefault(id(buffer), []).append(f"{module_name}.{name}" if module_name else name)
    return list(groups.values())


def _matches(name: str, patterns: Iterable[str] | None) -> bool:
    return any(re.search(pattern, name) for pattern in patterns or ())


def name_problems(model: Any, names: Iterable[str], composite: bool) -> tuple[list[str], list[str]]:
    """``(missing, unexpected)``: the model's tensors that no checkpoint name fills (a tied tensor needs
    one of its names), and the checkpoint's text tensors the model has no place for. Patterns the model
    class declares ignorable (``_keys_to_ignore_on_load_*``) are left out, as transformers does."""
    given = {text for name in names if (text := text_name(name, composite)) is not None}
    aliases = _state_aliases(model)
    held = {name for group in aliases for name in group}
    missing = sorted(group[0] for group in aliases
                     if not given.intersection(group)
                     and not _matches(group[0], getattr(model, "_keys_to_ignore_on_load_missing", None)))
    unexpected = sorted(name for name in given
                        if name not in held
                        and not _matches(name, getattr(model, "_keys_to_ignore_on_load_unexpected", None)))
    return missing, unexpected


def write_tiny_vision_language(out: str | Path, tie_word_embeddings: bool, seed: int = 0,
                               dtype: str = "bfloat16") -> Path:
    """A random-init ``Qwen3_5ForConditionalGeneration`` at tiny sizes in the released layout (vision tower,
    hybrid text layers, bfloat16 as released), for tests and the GPU probe; no tokenizer."""
    import torch
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    config = Qwen3_5Config(
        text_config={"vocab_size": 160, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                     "layer_types": ["linear_attention", "full_attention"], "num_attention_heads": 2,
                     "num_key_value_heads": 1, "head_dim": 16, "linear_num_key_heads": 2,
                     "linear_num_value_heads": 2, "linear_key_head_dim": 8, "linear_value_head_dim": 8,
                     "max_position_embeddings": 512, "tie_word_embeddings": tie_word_embeddings},
        vision_config={"depth": 1, "hidden_size": 16, "intermediate_size": 32, "num_heads": 2,
                       "out_hidden_size": 32},
        tie_word_embeddings=tie_word_embeddings,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3_5ForConditionalGeneration(config)
        with torch.no_grad():  # no tensor keeps a value an unloaded parameter would start from (norms at 1)
            for param in model.parameters():
                param.add_(torch.randn_like(param) * 0.02)
    model.to(getattr(torch, dtype)).save_pretrained(str(out))
    # The releases also hold a multi-token-prediction head (``mtp.*``) that transformers' class lacks.
    from safetensors.torch import load_file, save_file

    weights = Path(out) / "model.safetensors"
    state = load_file(str(weights))
    state["mtp.fc.weight"] = torch.zeros(32, 64, dtype=getattr(torch, dtype))
    save_file(state, str(weights), metadata={"format": "pt"})
    return Path(out)
