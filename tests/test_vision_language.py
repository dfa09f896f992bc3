"""Vision-language checkpoints (released Qwen3.5 4B/9B are ``Qwen3_5ForConditionalGeneration``): the learner
loads their text model under ZeRO-3 with the checkpoint's values, a checkpoint that does not fit is refused,
vLLM starts them text-only, the weight sync sends the names vLLM's loader takes, and the plan counts what
the engine loads. On a tiny random-init checkpoint in the released layout (vision tower, hybrid layers,
``mtp.*`` head, bfloat16), built here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import test_generation_vllm
import torch
from learner_support import _save_tokenizer
from safetensors.torch import load_file, save_file

from wmrl.config import load_config
from wmrl.generation import vllm_engine
from wmrl.generation.config import VLLMConfig
from wmrl.learner.weights import flatten, gathered_buckets
from wmrl.models.architecture import load_text_config, parameter_counts
from wmrl.models.loading import ModelError, load_causal_lm
from wmrl.models.vision_language import checkpoint_name, text_name, write_tiny_vision_language
from wmrl.planning.memory import plan

ROOT = Path(__file__).resolve().parents[1]
stand_in_vllm = test_generation_vllm.fake_vllm  # the stand-in vLLM fixture (0.27 and 0.33), under this name
PROBE = ROOT / "scripts" / "gpu_probe_vl.py"

# vLLM 0.33's names for a Qwen3_5ForConditionalGeneration checkpoint tensor, from its source:
# Qwen3VLForConditionalGeneration.hf_to_vllm_mapper (model_executor/models/qwen3_vl.py 1969-1975), which
# Qwen3_5ForConditionalGeneration extends with "mtp." -> dropped (qwen3_5.py 476-479). The language model
# is the module built under _mark_language_model as "language_model" (qwen3_5.py 522-524); "visual" is
# the tower that language_model_only replaces with a StageMissingLayer, whose weights are skipped.
VLLM_033_PREFIXES = {"model.visual.": "visual.", "lm_head.": "language_model.lm_head.",
                     "model.language_model.": "language_model.model.", "mtp.": None}


def _vllm_033_name(name: str) -> str | None:
    for old, new in VLLM_033_PREFIXES.items():
        if name.startswith(old):
            return None if new is None else new + name.removeprefix(old)
    return name


@pytest.fixture(scope="module", params=[True, False], ids=["tied", "untied"])
def vl_dir(request, tmp_path_factory) -> Path:
    """A tiny vision-language checkpoint (tied embeddings like the 4B, untied like the 9B) + tokenizer."""
    path = write_tiny_vision_language(tmp_path_factory.mktemp("vl"), tie_word_embeddings=request.param)
    _save_tokenizer(path)
    return path


def _text_tensors(path: Path) -> dict[str, torch.Tensor]:
    stored = {text_name(k, True): v for k, v in load_file(str(path / "model.safetensors")).items()}
    stored.pop(None, None)
    return stored  # type: ignore[return-value]


def _edited(src: Path, dst: Path, drop: str = "", add: str = "") -> Path:
    dst.mkdir()
    for item in src.iterdir():
        (dst / item.name).write_bytes(item.read_bytes())
    state = load_file(str(dst / "model.safetensors"))
    if drop:
        state.pop(drop)
    if add:
        state[add] = torch.zeros(64, 32, dtype=torch.bfloat16)
    save_file(state, str(dst / "model.safetensors"), metadata={"format": "pt"})
    return dst


# --------------------------------------------------------------------------- the learner's load


@pytest.mark.slow
def test_the_learners_zero3_load_equals_a_plain_load_and_refuses_a_checkpoint_that_does_not_fit():
    """scripts/gpu_probe_vl.py on CPU (gloo, one rank): policy and reference loaded as build_engines loads
    them, every parameter gathered and compared with a plain load and the checkpoint; a missing and an
    extra text tensor are refused (before the fix both loaded without a word)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    done = subprocess.run([sys.executable, str(PROBE), "--device", "cpu"], capture_output=True, text=True,
                          env=env, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert out["ok"] and out["device"] == "cpu"
    for case in out["cases"].values():
        for module in (case["policy"], case["reference"]):
            assert module["parameters"] >= 27 and module["differ"] == [] and module["dtype"] == "bfloat16"
            assert module["vision_parameters"] == 0
        assert case["sync_names_are_checkpoint_text_names"]
    assert out["refusals"]["missing"]["refused"] and out["refusals"]["unexpected"]["refused"]


def test_a_plain_load_holds_the_checkpoints_text_weights_and_no_vision_tower(vl_dir):
    model = load_causal_lm(vl_dir)
    stored = _text_tensors(vl_dir)
    params = dict(model.named_parameters())
    assert type(model).__name__ == "Qwen3_5ForCausalLM" and set(params) == set(stored)
    assert all(torch.equal(params[name], stored[name].float()) for name in stored)
    assert (model.lm_head.weight is model.model.embed_tokens.weight) == model.config.tie_word_embeddings


def test_a_checkpoint_missing_a_text_tensor_is_refused_with_its_name(vl_dir, tmp_path):
    broken = _edited(vl_dir, tmp_path / "missing", drop="model.language_model.layers.1.mlp.down_proj.weight")
    with pytest.raises(ModelError, match=r"missing from the checkpoint \(model\.layers\.1\.mlp\.down_proj\.weight\)"):
        load_causal_lm(broken)


def test_a_checkpoint_tensor_the_model_has_no_place_for_is_refused_with_its_name(vl_dir, tmp_path):
    extra = _edited(vl_dir, tmp_path / "extra", add="model.language_model.layers.2.mlp.up_proj.weight")
    with pytest.raises(ModelError, match=r"no place for \(model\.layers\.2\.mlp\.up_proj\.weight\)"):
        load_causal_lm(extra)


def test_an_untied_text_config_under_a_tied_checkpoint_is_refused(tmp_path):
    """A vision-language config whose top level ties the embeddings but whose text_config does not: the
    checkpoint has no lm_head.weight, and the text model would keep a random head."""
    path = write_tiny_vision_language(tmp_path / "vl", tie_word_embeddings=True)
    config = json.loads((path / "config.json").read_text())
    config["text_config"]["tie_word_embeddings"] = False
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelError, match=r"lm_head\.weight"):
        load_causal_lm(path)


def test_text_and_checkpoint_names_are_one_rule_both_ways(vl_dir):
    from wmrl.models.vision_language import checkpoint_tensor_names

    names = checkpoint_tensor_names(vl_dir)
    assert any(n.startswith("model.visual.") for n in names) and "mtp.fc.weight" in names
    for name in names:
        text = text_name(name, True)
        assert (text is None) == name.startswith(("model.visual.", "mtp."))
        if text is not None:
            assert checkpoint_name(text, True) == name
    assert text_name("model.layers.0.mlp.up_proj.weight", False) == "model.layers.0.mlp.up_proj.weight"


# --------------------------------------------------------------------------- vLLM and the plan


def test_vllm_starts_a_vision_language_checkpoint_text_only_and_a_text_model_as_before(stand_in_vllm, vl_dir, tmp_path):
    vllm_engine.VLLMGenerator(str(vl_dir), VLLMConfig(weight_transfer="ipc"))
    assert stand_in_vllm.calls[0][1]["language_model_only"] is True  # no vision tower, no vision profiling
    text_only = load_causal_lm(vl_dir)
    text_only.save_pretrained(tmp_path / "text")  # a text-only checkpoint (what `wmrl export` writes)
    _save_tokenizer(tmp_path / "text")
    vllm_engine.VLLMGenerator(str(tmp_path / "text"), VLLMConfig(weight_transfer="ipc"))
    assert "language_model_only" not in stand_in_vllm.calls[-2][1]


def test_the_weight_sync_sends_the_names_vllms_loader_took_from_the_checkpoint(stand_in_vllm, vl_dir):
    """The sync's names, mapped as vLLM 0.33's Qwen3_5ForConditionalGeneration.load_weights maps them, all
    land in its language model, and are exactly the checkpoint's text tensors (names and shapes) that the
    same loader read at start-up."""
    gen = vllm_engine.VLLMGenerator(str(vl_dir), VLLMConfig(weight_transfer="ipc"))
    learner = load_causal_lm(vl_dir)
    gen.update_weights(flatten(gathered_buckets(learner, 2**20, torch.bfloat16)))
    infos = [args["update_info"] for name, args in stand_in_vllm.calls if name == "update_weights"]
    sent = dict(zip([n for i in infos for n in i["names"]], [tuple(s) for i in infos for s in i["shapes"]]))
    stored = {checkpoint_name(k, True): tuple(v.shape) for k, v in _text_tensors(vl_dir).items()}
    assert sent == stored
    assert all(_vllm_033_name(name).startswith("language_model.") for name in sent)  # type: ignore[union-attr]
    assert ("lm_head.weight" in sent) == (not learner.config.tie_word_embeddings)  # tied: vLLM ties it too


def test_the_plan_counts_the_text_weights_the_engine_loads_not_the_vision_tower(vl_dir):
    cfg = load_config(ROOT / "configs" / "qwen3.5-4b.yaml", [f"model.path={vl_dir}", "model.architecture=''"])
    text = parameter_counts(load_text_config(vl_dir)).total
    vision = sum(v.numel() for k, v in load_file(str(vl_dir / "model.safetensors")).items()
                 if k.startswith("model.visual."))
    p = plan(cfg)
    assert p.generation is not None and vision > 0
    assert p.generation.gpu["generator_weights"] == 2 * text  # bf16 text weights; the tower is not loaded
