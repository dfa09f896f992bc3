"""Probe (issue 34, item 5): a vision-language checkpoint loaded the learner's way under ZeRO-3 holds the
checkpoint's text weights, and a checkpoint that does not fit is refused.

One process, one device (CUDA when there is one, else CPU over gloo; the JSON says which), torch +
transformers + DeepSpeed, no vLLM, no network, well under a minute. For a tiny random-init
``Qwen3_5ForConditionalGeneration`` saved in the released layout (vision tower, hybrid text layers, an
``mtp.*`` head, bfloat16), once with tied and once with untied embeddings:

- the policy as ``build_engines`` loads it (``zero3_loading(deepspeed_config)`` + ``load_causal_lm``,
  bf16, ZeRO-3) and the reference as it loads it (``reference_config``) are gathered parameter by
  parameter and compared, exactly, with a plain ``load_causal_lm`` and with the checkpoint's own
  ``model.language_model.*`` / ``lm_head.*`` tensors; no vision parameter is built;
- the names the weight sync sends (``checkpoint_name`` of each parameter) are the checkpoint's text
  tensor names, which vLLM's ``load_weights`` took at start-up;
- the same load refuses a checkpoint with a text tensor missing and one with a text tensor the model
  has no place for (both were silent before: random init, or dropped).

  python scripts/gpu_probe_vl.py [--device auto|cuda|cpu]

Prints one JSON object; exit 0 when every check holds, else 1. Tested on CPU (tests/test_vision_language.py);
not yet run on a GPU. The lent GPU machines' image has torch and transformers (5.17) but no DeepSpeed:
carry wheels of deepspeed==0.19.8 and what it needs beyond the image (hjson, pydantic, pydantic-core,
annotated-types, typing-inspection), and transformers==5.24.0, the version this was checked with.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DROPPED = "model.language_model.layers.0.linear_attn.A_log"
EXTRA = "model.language_model.layers.2.mlp.up_proj.weight"  # a layer the config does not have


def _compare(module: Any, plain: Any, checkpoint: dict[str, Any]) -> dict[str, Any]:
    """Each of ``module``'s (ZeRO-3) parameters, gathered, against ``plain``'s and the checkpoint's."""
    import deepspeed
    import torch

    plain_params = dict(plain.named_parameters())
    differ: list[str] = []
    names = []
    dtype = None
    for name, param in module.named_parameters():
        names.append(name)
        with deepspeed.zero.GatheredParameters([param]):
            value = param.data.detach().cpu().clone()
        dtype = value.dtype
        reference = plain_params[name].detach().cpu().to(value.dtype)
        stored = checkpoint[name].to(value.dtype)
        if not (torch.equal(value, reference) and torch.equal(value, stored)):
            differ.append(name)
    return {"parameters": len(names), "same_names_as_plain": names == list(plain_params),
            "differ": differ, "dtype": str(dtype).removeprefix("torch."),
            "vision_parameters": sum("visual" in n for n in names)}


def _case(path: Path, tie: bool) -> dict[str, Any]:
    from safetensors.torch import load_file

    from wmrl.learner.config import LearnerConfig
    from wmrl.learner.engine import DTYPES, deepspeed_config, reference_config, zero3_loading
    from wmrl.models.loading import load_causal_lm
    from wmrl.models.vision_language import checkpoint_name, text_name, write_tiny_vision_language

    write_tiny_vision_language(path, tie_word_embeddings=tie)
    stored = {text_name(k, True): v for k, v in load_file(str(path / "model.safetensors")).items()}
    stored.pop(None, None)
    cfg = LearnerConfig(zero_stage=3, precision="bf16", zero3_persistence_threshold=0)
    plain = load_causal_lm(path, "float32", device="cpu")
    with zero3_loading(deepspeed_config(cfg)):
        policy = load_causal_lm(path, "float32", device=None)  # as build_engines loads the policy
    with zero3_loading(reference_config(cfg)):
        reference = load_causal_lm(path, DTYPES[cfg.precision], device=None)  # and the reference
    sent = [checkpoint_name(name, True) for name, _ in policy.named_parameters()]
    text_tensors = sorted(checkpoint_name(name, True) for name in stored)
    result = {"tie_word_embeddings": tie, "class": type(policy).__name__,
              "policy": _compare(policy, plain, stored), "reference": _compare(reference, plain, stored),
              "sync_names_are_checkpoint_text_names": sorted(sent) == text_tensors and len(set(sent)) == len(sent)}
    result["ok"] = (result["sync_names_are_checkpoint_text_names"] and result["class"] == "Qwen3_5ForCausalLM"
                    and all(not r["differ"] and r["same_names_as_plain"] and not r["vision_parameters"]
                            and r["parameters"] > 0 for r in (result["policy"], result["reference"])))
    return result


def _refusal(path: Path, change: str) -> dict[str, Any]:
    """The learner's ZeRO-3 load of a checkpoint with ``DROPPED`` removed or ``EXTRA`` added must raise."""
    import torch
    from safetensors.torch import load_file, save_file

    from wmrl.learner.config import LearnerConfig
    from wmrl.learner.engine import deepspeed_config, zero3_loading
    from wmrl.models.loading import ModelError, load_causal_lm
    from wmrl.models.vision_language import text_name, write_tiny_vision_language

    write_tiny_vision_language(path, tie_word_embeddings=False)
    weights = path / "model.safetensors"
    state = load_file(str(weights))
    if change == "missing":
        state.pop(DROPPED)
    else:
        state[EXTRA] = torch.zeros(64, 32, dtype=torch.bfloat16)
    save_file(state, str(weights), metadata={"format": "pt"})
    expected = text_name(DROPPED if change == "missing" else EXTRA, True)
    cfg = LearnerConfig(zero_stage=3, precision="bf16", zero3_persistence_threshold=0)
    try:
        with zero3_loading(deepspeed_config(cfg)):
            load_causal_lm(path, "float32", device=None)
    except ModelError as err:
        return {"refused": True, "names_it": str(expected) in str(err), "ok": str(expected) in str(err),
                "message": str(err)[:300]}
    return {"refused": False, "ok": False, "message": f"loaded without an error although {expected} is {change}"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"ok": False, "error": "--device cuda: torch sees no CUDA device"}))
        return 1
    device = "cuda" if args.device == "auto" and torch.cuda.is_available() else args.device
    device = "cpu" if device == "auto" else device
    if device == "cpu":
        import os

        os.environ["DS_ACCELERATOR"] = "cpu"  # before DeepSpeed is imported: gloo, even beside a GPU
    import deepspeed
    import transformers

    from wmrl.learner.distributed import init_distributed
    from wmrl.models.loading import quiet_hf

    quiet_hf()
    init_distributed()
    out: dict[str, Any] = {
        "probe": "issue 34 item 5: vision-language checkpoint under ZeRO-3", "device": device,
        "device_name": torch.cuda.get_device_name() if device == "cuda" else "cpu (no CUDA used: gloo, CPU tensors)",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "deepspeed": deepspeed.__version__},
    }
    with tempfile.TemporaryDirectory(prefix="wmrl-vl-probe-") as tmp:
        root = Path(tmp)
        out["cases"] = {("tied" if tie else "untied"): _case(root / f"vl-{tie}", tie) for tie in (True, False)}
        out["refusals"] = {change: _refusal(root / f"vl-{change}", change) for change in ("missing", "unexpected")}
    out["ok"] = all(c["ok"] for c in out["cases"].values()) and all(r["ok"] for r in out["refusals"].values())
    out["seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(out, indent=1))
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
