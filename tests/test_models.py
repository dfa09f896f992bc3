"""The tiny model and tokenizer (``wmrl model init``) and loading from local directories only."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from models_support import CORPUS, build_tiny

from wmrl.models.cache import MARKER, CacheConflict
from wmrl.models.loading import OFFLINE_ENV, ModelError, load_causal_lm, load_tokenizer
from wmrl.models.tokenizer import CHAT_TEMPLATE, ENDOFTEXT, IM_END, IM_START, train_bpe, wrap_hf

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_tiny(tmp_path_factory.mktemp("cache"))


def test_tokenizer_round_trips_code_unicode_and_whitespace(tiny):
    tok = load_tokenizer(tiny)
    text = 'def f(x):\n\tif x:  # é, ü, 中文, 🙂\n        return "a\\nb"\r\n\n\n   trailing   '
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text


def test_frequent_lines_become_single_tokens():
    tok = wrap_hf(train_bpe(["x = compute_the_value(alpha, beta)\n"] * 50, 600), 512)
    assert len(tok.encode("x = compute_the_value(alpha, beta)\n", add_special_tokens=False)) == 1


def test_chat_template_is_chatml_with_single_special_tokens(tiny):
    tok = load_tokenizer(tiny)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    ids = tok.encode(text, add_special_tokens=False)
    specials = tok.convert_tokens_to_ids([ENDOFTEXT, IM_START, IM_END])
    assert specials == [0, 1, 2]
    assert ids.count(1) == 3 and ids.count(2) == 2  # each special token is one id, never split
    assert tok.eos_token == IM_END and tok.pad_token == ENDOFTEXT


def test_saved_directory_is_a_plain_hf_model_dir(tiny):
    config = json.loads((tiny / "config.json").read_text())
    assert config["architectures"] == ["Qwen3ForCausalLM"] and config["model_type"] == "qwen3"
    assert (tiny / "model.safetensors").is_file()
    tok_config = json.loads((tiny / "tokenizer_config.json").read_text())
    assert tok_config["chat_template"] == CHAT_TEMPLATE
    assert tok_config["tokenizer_class"] == "PreTrainedTokenizerFast"  # transformers 4.x (vLLM) knows it
    generation = json.loads((tiny / "generation_config.json").read_text())
    assert generation["eos_token_id"] == [2, 0]


def test_model_init_is_deterministic(tmp_path):
    a = build_tiny(tmp_path / "a")
    b = build_tiny(tmp_path / "b")
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_model_init_seed_changes_the_weights(tmp_path):
    a = build_tiny(tmp_path / "a")
    b = build_tiny(tmp_path / "b", seed=1)
    assert a != b
    assert (a / "model.safetensors").read_bytes() != (b / "model.safetensors").read_bytes()


def test_model_init_cache_hit_does_not_rebuild(tmp_path):
    from models_support import tiny_config

    from wmrl.models.init import init_tiny_model

    path, built = init_tiny_model(tiny_config(tmp_path), CORPUS)
    stamp = (path / "model.safetensors").stat().st_mtime_ns
    again, built_again = init_tiny_model(tiny_config(tmp_path), CORPUS)
    assert (built, built_again) == (True, False)
    assert again == path and (path / "model.safetensors").stat().st_mtime_ns == stamp


def test_model_init_refuses_a_directory_it_did_not_make(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(CacheConflict, match="not the output of this build"):
        build_tiny(tmp_path / "cache", out=out)
    assert (out / "notes.txt").read_text() == "keep me" and not (out / MARKER).exists()


def test_loading_sets_offline_flags_and_opens_no_socket(tiny, monkeypatch):
    attempts: list[object] = []

    def refuse(self, address, *args, **kwargs):
        attempts.append(address)
        raise OSError("network disabled by the test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    tok = load_tokenizer(tiny)
    model = load_causal_lm(tiny)
    assert attempts == []
    assert all(os.environ.get(k) == v for k, v in OFFLINE_ENV.items())
    assert model.config.vocab_size >= len(tok)


def test_loading_works_without_a_network_namespace(tiny):
    """The same load in a process that has no network at all (``unshare -n``), where the tool exists."""
    probe = subprocess.run(["unshare", "-n", "true"], check=False, capture_output=True)
    if probe.returncode != 0:
        # Containers without user namespaces forbid it; CI runs as root, where it works. The offline
        # flags are asserted by the other loading tests either way.
        pytest.skip("unshare -n is not permitted here (needs root or user namespaces)")
    code = ("from wmrl.models.loading import load_causal_lm, load_tokenizer; "
            f"load_tokenizer({str(tiny)!r}); load_causal_lm({str(tiny)!r}); print('ok')")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run(["unshare", "-n", sys.executable, "-c", code], check=False, capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("ok")


def test_a_path_that_is_not_a_model_dir_is_named_in_the_error(tmp_path):
    with pytest.raises(ModelError, match="is not a local directory"):
        load_causal_lm(tmp_path / "Qwen/Qwen3.5-4B")
    with pytest.raises(ModelError, match="no config.json"):
        load_causal_lm(tmp_path)


def test_qwen3_5_vision_language_checkpoint_loads_its_text_model_only(tmp_path):
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    config = Qwen3_5Config(
        text_config={"vocab_size": 128, "hidden_size": 32, "num_hidden_layers": 4, "num_attention_heads": 2,
                     "num_key_value_heads": 1, "head_dim": 16, "intermediate_size": 64, "linear_num_key_heads": 2,
                     "linear_num_value_heads": 2, "linear_key_head_dim": 8, "linear_value_head_dim": 8},
        vision_config={"depth": 1, "hidden_size": 16, "intermediate_size": 32, "num_heads": 2, "out_hidden_size": 32},
    )
    torch.manual_seed(0)
    full = Qwen3_5ForConditionalGeneration(config).eval()
    full.save_pretrained(str(tmp_path))
    text = load_causal_lm(tmp_path)
    assert type(text).__name__ == "Qwen3_5ForCausalLM"
    assert not any("visual" in name for name, _ in text.named_parameters())
    ids = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
    with torch.no_grad():
        assert torch.allclose(full(input_ids=ids).logits, text(input_ids=ids).logits, atol=1e-5)


@pytest.mark.slow
def test_cli_model_init_builds_from_the_builtin_pool_and_then_hits_the_cache(tmp_path):
    out = tmp_path / "tiny"
    cmd = [sys.executable, "-m", "wmrl.cli.main", "model", "init", "--out", str(out),
           "model.tiny.hidden_size=32", "model.tiny.num_layers=1", "model.tiny.intermediate_size=64"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    first = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env, timeout=900)
    assert first.returncode == 0, first.stderr[-2000:]
    assert first.stdout.startswith("built in") and str(out) in first.stdout
    facts = json.loads((out / MARKER).read_text())
    assert facts["tokenizer_vocab"] > 1000  # merges learned on the pool's overviews and solutions
    tok = load_tokenizer(out)
    assert len(tok.encode("from sklearn.pipeline import make_pipeline\n", add_special_tokens=False)) <= 2
    second = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env, timeout=900)
    assert second.returncode == 0 and second.stdout.startswith("cached:")


def test_a_killed_build_leaves_no_temp_dir_behind_the_next_one(tmp_path):
    from models_support import tiny_config

    from wmrl.models.init import default_tiny_dir, init_tiny_model, tiny_model_hash

    cfg = tiny_config(tmp_path)
    out = default_tiny_dir(cfg, tiny_model_hash(cfg.tiny, CORPUS))
    stale = out.parent / f".tmp-{out.name}.99999"  # what a SIGKILLed build with pid 99999 leaves
    stale.mkdir(parents=True)
    (stale / "model.safetensors").write_bytes(b"half")
    path, built = init_tiny_model(cfg, CORPUS)
    assert built and path == out and not stale.exists()
    assert [p.name for p in out.parent.iterdir() if p.name.startswith(".tmp-")] == []
