"""The SFT engine: packing is exact, the loss falls, results are cached and resumable."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from models_support import build_tiny, chat_examples
from safetensors.torch import load_file

from wmrl.models.cache import MARKER
from wmrl.models.loading import load_causal_lm, load_tokenizer
from wmrl.sft import engine
from wmrl.sft.config import SFTConfig
from wmrl.sft.engine import StopTraining, run_sft
from wmrl.sft.example import SFTExample, build_row, pack_rows

# One thread: on a shared 2-core machine OpenMP threads spinning against other jobs cost more than they give.
FAST = SFTConfig(lr=1e-2, epochs=12, rows_per_step=1, warmup_steps=2, checkpoint_every=0, threads=1)


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return build_tiny(tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def examples(base):
    return chat_examples(load_tokenizer(base))


def test_packed_row_loss_equals_the_examples_one_by_one(base, examples):
    model = load_causal_lm(base)
    rows = pack_rows(examples, max_tokens=4096, seed=0)
    assert any(len(r.members) > 1 for r in rows)  # the prompt really is shared
    packed_total = torch.tensor(0.0)
    with torch.no_grad():
        for row in rows:
            packed = build_row(row, examples)
            losses = engine._row_loss(model, packed)
            packed_total += losses.sum()
        alone = torch.tensor(0.0)
        for ex in examples:
            ids = torch.tensor([list(ex.prompt_ids + ex.target_ids)])
            logits = model(input_ids=ids).logits[0, len(ex.prompt_ids) - 1: -1]
            alone += torch.nn.functional.cross_entropy(logits, ids[0, len(ex.prompt_ids):], reduction="sum")
    assert torch.allclose(packed_total, alone, rtol=1e-5)


def test_rows_hold_every_example_once_and_respect_the_token_limit(examples):
    limit = len(examples[0].prompt_ids) + 2 * max(len(e.target_ids) for e in examples)
    rows = pack_rows(examples, max_tokens=limit, seed=3)
    members = sorted(i for row in rows for i in row.members)
    assert members == list(range(len(examples)))
    assert all(row.length(examples) <= limit for row in rows)
    assert pack_rows(examples, limit, seed=3) == rows  # a pure function of the seed


def test_an_example_longer_than_a_row_is_refused_with_the_key_to_raise():
    long = SFTExample(list(range(10)), list(range(10)), "world_model")
    with pytest.raises(ValueError, match=r"example 0 \(world_model\).*sft.pack_tokens=16"):
        pack_rows([long], max_tokens=16, seed=0)


def test_sft_loss_decreases(base, examples, tmp_path):
    cfg = replace(FAST, epochs=30)
    out, trained = run_sft(base, examples, cfg, cache_dir=str(tmp_path), progress=False)
    import json

    facts = json.loads((out / MARKER).read_text())
    assert trained and facts["steps"] == cfg.epochs * len(pack_rows(examples, cfg.pack_tokens, 0))
    assert facts["final_loss"]["loss/agent"] < 0.6 * facts["first_loss"]


def test_sft_output_is_a_loadable_hf_directory_with_the_base_tokenizer(base, examples, tmp_path):
    out, _ = run_sft(base, examples, FAST, cache_dir=str(tmp_path), progress=False)
    assert (out / "tokenizer.json").read_bytes() == (base / "tokenizer.json").read_bytes()
    model = load_causal_lm(out)
    trained = load_file(str(out / "model.safetensors"))
    initial = load_file(str(base / "model.safetensors"))
    assert any(not torch.equal(trained[k], initial[k]) for k in initial)
    assert type(model).__name__ == "Qwen3ForCausalLM"


def test_sft_cache_hit_skips_training(base, examples, tmp_path, monkeypatch):
    first, trained = run_sft(base, examples, FAST, cache_dir=str(tmp_path), progress=False)

    def must_not_train(*args, **kwargs):
        raise AssertionError("training ran on a cache hit")

    monkeypatch.setattr(engine, "train", must_not_train)
    again, trained_again = run_sft(base, examples, replace(FAST, threads=1, checkpoint_every=5),
                                   cache_dir=str(tmp_path), progress=False)
    assert (trained, trained_again) == (True, False) and again == first


def test_changed_examples_or_hyperparameters_miss_the_cache(base, examples, tmp_path):
    short = replace(FAST, epochs=1)
    a, _ = run_sft(base, examples, short, cache_dir=str(tmp_path), progress=False)
    b, trained_b = run_sft(base, examples[:-1], short, cache_dir=str(tmp_path), progress=False)
    c, trained_c = run_sft(base, examples, replace(short, lr=1e-3), cache_dir=str(tmp_path), progress=False)
    assert trained_b and trained_c and len({a, b, c}) == 3


def test_a_stopped_sft_resumes_and_ends_with_the_uninterrupted_weights(base, examples, tmp_path):
    one_per_row = max(len(e.prompt_ids) + len(e.target_ids) for e in examples) + 1
    cfg = replace(FAST, epochs=4, checkpoint_every=3, pack_tokens=one_per_row)  # 9 rows = 9 steps per epoch
    straight, _ = run_sft(base, examples, cfg, cache_dir=str(tmp_path / "a"), progress=False)
    with pytest.raises(StopTraining):
        run_sft(base, examples, cfg, cache_dir=str(tmp_path / "b"), progress=False, stop_after=7)
    work = [p for p in (tmp_path / "b" / "sft").iterdir() if p.name.startswith(".work-")]
    assert len(work) == 1 and (work[0] / "checkpoint.pt").is_file()
    assert not [p for p in (tmp_path / "b" / "sft").iterdir() if p.name.startswith("sft-")]  # nothing half-written
    resumed, trained = run_sft(base, examples, cfg, cache_dir=str(tmp_path / "b"), progress=False)
    import json

    assert trained and json.loads((resumed / MARKER).read_text())["resumed_at_step"] == 6
    a, b = load_file(str(straight / "model.safetensors")), load_file(str(resumed / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert not work[0].exists()  # the checkpoints are removed once the result is in place


def test_examples_sharing_only_a_prompt_head_pack_exactly(base, examples):
    tok = load_tokenizer(base)
    head = [{"role": "system", "content": "You judge code. Answer in JSON."}]
    mixed = []
    for task in ("iris", "wine"):
        prompt = tok.apply_chat_template([*head, {"role": "user", "content": f"Check {task}."}],
                                         add_generation_prompt=True, tokenize=False)
        mixed.append(SFTExample(tok.encode(prompt, add_special_tokens=False),
                                tok.encode('{"verdict": "pass"}<|im_end|>', add_special_tokens=False), "world_model"))
    rows = pack_rows(mixed + examples, max_tokens=4096, seed=1)
    assert any(len(r.members) > 1 and any(i < 2 for i in r.members) for r in rows)
    model = load_causal_lm(base)
    with torch.no_grad():
        packed = sum(engine._row_loss(model, build_row(r, mixed + examples)).sum() for r in rows)
    one_by_one = torch.tensor(0.0)
    with torch.no_grad():
        for ex in mixed + examples:
            ids = torch.tensor([list(ex.prompt_ids + ex.target_ids)])
            logits = model(input_ids=ids).logits[0, len(ex.prompt_ids) - 1: -1]
            one_by_one += torch.nn.functional.cross_entropy(logits, ids[0, len(ex.prompt_ids):], reduction="sum")
    assert torch.allclose(packed, one_by_one, rtol=1e-5)


def test_epochs_per_kind_limits_the_passes_over_that_kind(base, examples):
    tok = load_tokenizer(base)
    judge = chat_examples(tok, tasks=("iris",), replies=2, kind="world_model")
    mixed = examples + judge
    cfg = replace(FAST, epochs=3, epochs_per_kind={"world_model": 1})
    passes = {kind: sum(1 for rows in engine.plan_steps(mixed, cfg) for row in rows for i in row.members
                        if mixed[i].kind == kind) for kind in ("agent", "world_model")}
    assert passes == {"agent": 3 * len(examples), "world_model": len(judge)}


def test_a_kind_with_fewer_passes_is_spread_over_every_epoch(base, examples):
    """One world-model pass must not all come first: 29 agent-only epochs after it erased it."""
    tok = load_tokenizer(base)
    judge = chat_examples(tok, tasks=("iris", "wine", "digits", "moons", "blobs", "faces"), replies=1,
                          kind="world_model")
    mixed = examples + judge
    one_per_row = max(len(ex.prompt_ids) + len(ex.target_ids) for ex in mixed)  # nothing packs together
    cfg = replace(FAST, epochs=3, epochs_per_kind={"world_model": 1}, pack_tokens=one_per_row)
    steps = engine.plan_steps(mixed, cfg)
    epoch_len = len(examples) + len(judge) // 3  # every agent example once, a third of the judge's
    assert len(steps) == 3 * epoch_len
    for epoch in range(3):
        kinds = [mixed[row.members[0]].kind for rows in steps[epoch * epoch_len: (epoch + 1) * epoch_len]
                 for row in rows]
        assert kinds.count("world_model") == 2 and kinds.count("agent") == len(examples)


def test_cli_sft_names_a_base_that_is_not_a_model_directory(tmp_path):
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-m", "wmrl.cli.main", "sft", "--base", str(tmp_path / "nope")],
                          check=False, capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(repo), "HOME": str(tmp_path)})
    assert done.returncode == 2
    assert "is not a local directory" in done.stderr and str(tmp_path / "nope") in done.stderr


def test_a_run_keeps_the_initial_policy_pinned_at_its_first_start(base, tmp_path):
    """A resumed run must not resolve its config again: a newer SFT recipe or another model.path would
    swap its KL reference and its world model mid-run."""
    import shutil

    from wmrl.config import load_config
    from wmrl.sft.pipeline import INITIAL_POLICY, pinned_initial_policy

    first_model = tmp_path / "first"
    shutil.copytree(base, first_model)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    quiet = lambda *_: None
    assert pinned_initial_policy(load_config(None, [f"model.path={first_model}"]), run_dir, quiet) == first_model
    assert (run_dir / INITIAL_POLICY).is_file()
    # the config now names another model: the run keeps the one it started with
    assert pinned_initial_policy(load_config(None, [f"model.path={base}"]), run_dir, quiet) == first_model
    shutil.rmtree(first_model)
    with pytest.raises(RuntimeError, match="is gone"):
        pinned_initial_policy(load_config(None, [f"model.path={base}"]), run_dir, quiet)


def test_train_relaunch_of_a_pinned_run_does_not_build_the_default(tmp_path, monkeypatch, capsys):
    """`wmrl train` on a run that has started takes its pin: no SFT before launch (which checks the rest)."""
    import argparse

    import wmrl.cli.launch
    import wmrl.sft.pipeline
    from wmrl.cli import train

    launched: list[argparse.Namespace] = []
    monkeypatch.setattr(wmrl.cli.launch, "run", lambda args: launched.append(args) or 0)
    monkeypatch.setattr(train, "build_initial_policy",
                        lambda *a, **k: pytest.fail("the default was resolved for a pinned run"))
    run_dir = tmp_path / "runs" / "mine"
    run_dir.mkdir(parents=True)
    (run_dir / wmrl.sft.pipeline.INITIAL_POLICY).write_text('{"path": "/somewhere", "build_hash": "x"}')
    args = argparse.Namespace(args=[f"runs_root={tmp_path / 'runs'}", "run_name=mine"], wait=False, every=15.0,
                              resume=True)
    assert train.run(args) == 0
    assert len(launched) == 1 and launched[0].resume and "run_name=mine" in launched[0].overrides
    assert f"pinned in {run_dir / 'initial_policy.json'}" in capsys.readouterr().out


def test_the_default_is_resolved_once_per_process_per_sft_config(tmp_path, monkeypatch):
    """`wmrl train` resolves the default, then its local coordinator pins it in the same process: the
    second resolve must not render every SFT example again (it did, and printed its lines twice); a
    config the SFT reads differently, or a build that is gone, resolves again."""
    import wmrl.sft.pipeline
    from wmrl.config import load_config

    built: list[Path] = []

    def build(cfg, progress=True, log=print):
        out = tmp_path / f"sft-{len(built)}"
        out.mkdir()
        (out / MARKER).write_text("{}")
        built.append(out)
        return out, True

    monkeypatch.setattr(wmrl.sft.pipeline, "sft_default_model", build)
    monkeypatch.setattr(wmrl.sft.pipeline, "_RESOLVED", {})
    resolve = wmrl.sft.pipeline.initial_policy_path
    first = resolve(load_config(None, ["run_name=a"]))
    assert resolve(load_config(None, ["run_name=b", "train.steps=3"])) == first  # nothing the SFT reads
    assert len(built) == 1
    assert resolve(load_config(None, ["sft.epochs=2"])) != first
    shutil.rmtree(first)
    assert resolve(load_config(None, ["run_name=a"])) not in (first, built[1]) and len(built) == 3
