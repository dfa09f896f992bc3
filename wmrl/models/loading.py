"""Load a policy or world model and its tokenizer from a local Hugging Face directory, never a hub.

Offline is enforced twice: the HF offline flags are set in the environment (``huggingface_hub`` and
``transformers`` then refuse every request), and every ``from_pretrained`` gets ``local_files_only``.

Qwen3.5 releases are ``Qwen3_5ForConditionalGeneration`` checkpoints (vision tower + language model,
``model_type: qwen3_5`` with a ``text_config``). For text-only use we load ``Qwen3_5ForCausalLM`` on
the checkpoint's ``text_config``: transformers (>= 5.2) maps the weight names
``model.language_model.*`` to ``model.*`` and skips ``model.visual.*``, so the vision tower is never
materialised. The same rule applies to any composite checkpoint whose text config names a causal LM.

A load whose model and checkpoint do not fit by name (a tensor of the model that no checkpoint tensor
fills, or a text tensor of the checkpoint the model has no place for) is a :class:`ModelError`, also
under ZeRO-3, where transformers does not report unexpected tensors (``wmrl/models/vision_language.py``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from wmrl.models.vision_language import (
    checkpoint_tensor_names,
    is_composite_dir,
    name_problems,
    text_config,
)

OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
_DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16", "auto": "auto"}


class ModelError(ValueError):
    """A model directory is missing, incomplete or of an unsupported kind; the message names it."""


def set_offline() -> None:
    """Forbid hub access for this process and its children (before anything from HF is imported)."""
    os.environ.update(OFFLINE_ENV)


set_offline()  # importing wmrl.models is enough: nothing that loads a model can reach a hub


def quiet_hf() -> None:
    """No per-shard progress bars from transformers, and on a machine without CUDA tell DeepSpeed
    (which transformers imports) that it is on CPU instead of letting it warn on stdout."""
    import torch
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")


def model_dir(path: str | Path) -> Path:
    """``path`` as a local model directory, or a :class:`ModelError` saying what is missing."""
    directory = Path(path).expanduser()
    if not str(path):
        raise ModelError("model.path is empty: give a local Hugging Face model directory")
    if not directory.is_dir():
        raise ModelError(
            f"model.path={str(path)!r} is not a local directory (models are never downloaded; "
            "copy the checkpoint to the cluster's storage, or build the tiny one with `wmrl model init`)"
        )
    if not (directory / "config.json").is_file():
        raise ModelError(f"{directory}: no config.json, so not a Hugging Face model directory")
    return directory


def load_tokenizer(path: str | Path) -> Any:
    from transformers import AutoTokenizer

    quiet_hf()
    directory = model_dir(path)
    if not any((directory / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
        raise ModelError(f"{directory}: no tokenizer.json / tokenizer_config.json")
    return AutoTokenizer.from_pretrained(str(directory), local_files_only=True)


def load_causal_lm(path: str | Path, dtype: str = "float32", device: str | None = "cpu") -> Any:
    """The causal LM in ``path`` (text model only for vision-language checkpoints), in eval mode.

    ``device=None`` leaves the parameters where loading put them (ZeRO-3 partitions, see
    ``wmrl/learner/engine.py``)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    if dtype not in _DTYPES:
        raise ModelError(f"dtype={dtype!r}; allowed: {', '.join(_DTYPES)}")
    quiet_hf()
    directory = model_dir(path)
    config = text_config(AutoConfig.from_pretrained(str(directory), local_files_only=True))
    torch_dtype: Any = "auto" if dtype == "auto" else getattr(torch, dtype)
    try:
        model, info = AutoModelForCausalLM.from_pretrained(
            str(directory), config=config, dtype=torch_dtype, local_files_only=True, output_loading_info=True
        )
    except ValueError as err:  # no causal-LM class registered for this config
        raise ModelError(f"{directory}: cannot load a causal LM for model_type={config.model_type!r}: {err}") from err
    check_loaded(model, directory, info)
    return (model if device is None else model.to(device)).eval()


def check_loaded(model: Any, directory: Path, info: dict[str, Any]) -> None:
    """A :class:`ModelError` unless every tensor of ``model`` came from the checkpoint and every text
    tensor of the checkpoint went into ``model``: by name (:func:`name_problems`, which also covers
    ZeRO-3) and as transformers reports it (its ``missing_keys`` catch a name it failed to map)."""

    missing, unexpected = name_problems(model, checkpoint_tensor_names(directory), is_composite_dir(directory))
    missing = sorted(set(missing) | set(info.get("missing_keys") or ()))
    unexpected = sorted(set(unexpected) | set(info.get("unexpected_keys") or ()))
    mismatched = sorted(str(key) for key in info.get("mismatched_keys") or ())
    if missing or unexpected or mismatched:
        parts = [f"{len(names)} {what} ({', '.join(names[:4])}{' ...' if len(names) > 4 else ''})"
                 for what, names in (("tensors of the model missing from the checkpoint", missing),
                                     ("checkpoint tensors the model has no place for", unexpected),
                                     ("tensors of another shape", mismatched)) if names]
        raise ModelError(f"{directory}: the weights do not fit the model its config.json describes: "
                         f"{'; '.join(parts)}. A partial or foreign checkpoint would train from random "
                         "values: copy the complete checkpoint (every shard of model.safetensors.index.json)")
