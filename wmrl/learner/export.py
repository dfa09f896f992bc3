"""A learner checkpoint as a plain Hugging Face model directory (config + safetensors + tokenizer).

The weights are consolidated by DeepSpeed's own tool (``zero_to_fp32``: it rebuilds the fp32 master
weights from every rank's ZeRO partitions) or, without ZeRO, read from the model-state file; the
architecture and tokenizer are the ``hf/`` copy of the initial model's files kept in the checkpoint.
The result is the standard layout ``transformers`` and vLLM load (``from_pretrained`` / ``LLM(path)``).
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

import torch

from wmrl.io import TMP_PREFIX, fsync_dir, step_name
from wmrl.learner.checkpoint import complete_checkpoints, read_meta
from wmrl.models.vision_language import name_problems, text_config

EXPORT_RECORD = "wmrl_export.json"  # written beside the weights: the step and checkpoint exported

LEARNER_CHECKPOINTS = Path("checkpoints") / "learner"  # inside a run directory


def find_checkpoint(source: Path, step: int | None = None) -> Path:
    """The checkpoint of ``source``: a run directory (newest, or ``step``) or a checkpoint directory."""
    source = Path(source)
    if (source / "learner.json").is_file():
        if step is not None and read_meta(source)["step"] != step:
            raise ValueError(f"{source} is the checkpoint of step {read_meta(source)['step']}, not of step {step}")
        return source
    root = source / LEARNER_CHECKPOINTS
    found = complete_checkpoints(root)
    if not found:
        raise ValueError(f"{source}: no learner checkpoint (looked for {root}/step-*/learner.json)")
    if step is None:
        return found[-1]
    wanted = root / step_name(step)
    if wanted not in found:
        steps = ", ".join(str(read_meta(p)["step"]) for p in found)
        raise ValueError(f"{source}: no complete learner checkpoint of step {step}; available steps: {steps}")
    return wanted


def consolidated_state_dict(checkpoint: Path) -> dict[str, torch.Tensor]:
    """Full fp32 weights by Hugging Face parameter name."""
    meta = read_meta(checkpoint)
    if meta["zero_stage"] == 0:
        states = torch.load(checkpoint / "mp_rank_00_model_states.pt", map_location="cpu", weights_only=False)
        return {k: v.float() for k, v in states["module"].items()}
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    return get_fp32_state_dict_from_zero_checkpoint(str(checkpoint.parent), tag=checkpoint.name)


def export_checkpoint(checkpoint: Path, out: Path) -> Path:
    """Write ``out`` (must not exist, or be an empty directory) from a learner checkpoint directory."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"{out} exists and is not an empty directory; choose a new output path")
    hf = checkpoint / "hf"
    if not (hf / "config.json").is_file():
        raise ValueError(f"{checkpoint}: no hf/config.json (the initial model's architecture) to export with")
    # A vision-language checkpoint (Qwen3.5 releases) trains and exports its text model only.
    config = text_config(AutoConfig.from_pretrained(str(hf), local_files_only=True))
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    state = consolidated_state_dict(checkpoint)
    missing, unexpected = name_problems(model, state, composite=False)  # the learner's names (tied ones once)
    if missing or unexpected:
        raise ValueError(
            f"{checkpoint}: weights do not fit the architecture in hf/config.json "
            f"(missing {missing[:5]}, unexpected {unexpected[:5]})"
        )
    model.load_state_dict(state, strict=False)  # a tied alias may be absent from ``state``
    if config.tie_word_embeddings:
        model.tie_weights()
    dtype = getattr(config, "dtype", None) or torch.float32  # save in the initial model's precision
    model = model.to(dtype if isinstance(dtype, torch.dtype) else getattr(torch, str(dtype)))

    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.parent / f"{TMP_PREFIX}{out.name}-{uuid.uuid4().hex[:8]}"
    try:
        model.save_pretrained(str(staging))  # config.json, generation_config.json, model*.safetensors
        if (hf / "tokenizer_config.json").is_file() or (hf / "tokenizer.json").is_file():
            AutoTokenizer.from_pretrained(str(hf), local_files_only=True).save_pretrained(str(staging))
        if (hf / "generation_config.json").is_file():
            shutil.copy2(hf / "generation_config.json", staging / "generation_config.json")
        # Which learner step this is: `wmrl eval` replays that step's evaluation stream by default.
        (staging / EXPORT_RECORD).write_text(json.dumps({"step": int(read_meta(checkpoint)["step"]),
                                                         "checkpoint": str(checkpoint)}) + "\n")
        for path in staging.iterdir():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
        if out.exists():
            out.rmdir()  # empty, checked above
        os.rename(staging, out)
        fsync_dir(out.parent)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out
