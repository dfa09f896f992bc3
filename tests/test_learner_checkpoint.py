"""Learner checkpoints on disk (keep rule, half-written ones, the reference pointer) and ``wmrl export``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from learner_support import advantages_of, make_groups, parameters, tiny_model_dir

from wmrl.cli.main import main
from wmrl.learner.checkpoint import complete_checkpoints, latest, prune
from wmrl.learner.config import LearnerConfig
from wmrl.learner.grpo import GRPOLearner


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_model_dir(tmp_path_factory.mktemp("model"))


def _trained(model_dir: Path, **cfg: object) -> GRPOLearner:
    learner = GRPOLearner(LearnerConfig(lr=1e-2, **cfg), model_dir)
    groups = make_groups(2, 2, seed=9)
    learner.update(groups, advantages_of(groups), np.array([0.5, 0.5]))
    return learner


def _fake_checkpoint(root: Path, step: int) -> Path:
    path = root / f"step-{step:08d}"
    path.mkdir(parents=True)
    (path / "learner.json").write_text(json.dumps({"step": step}))
    return path


def test_prune_keeps_the_newest_complete_checkpoints_and_nothing_it_did_not_make(tmp_path: Path) -> None:
    for step in (1, 2, 3, 10):
        _fake_checkpoint(tmp_path, step)
    (tmp_path / "step-00000004").mkdir()  # no learner.json: not ours to judge, left alone
    (tmp_path / "notes").mkdir()
    prune(tmp_path, keep=2)
    assert [p.name for p in complete_checkpoints(tmp_path)] == ["step-00000003", "step-00000010"]
    assert (tmp_path / "step-00000004").is_dir() and (tmp_path / "notes").is_dir()


def test_a_half_written_checkpoint_is_never_the_latest(tmp_path: Path) -> None:
    _fake_checkpoint(tmp_path, 1)
    (tmp_path / ".tmp-step-00000002").mkdir()  # a writer killed before its rename
    (tmp_path / "step-00000003").mkdir()  # a directory without its learner.json
    assert latest(tmp_path) == tmp_path / "step-00000001"


def test_save_writes_a_whole_checkpoint_with_its_reference_pointer(model_dir: Path, tmp_path: Path) -> None:
    learner = _trained(model_dir, keep_checkpoints=2)
    for step in (1, 2, 3):
        learner.save_checkpoint(tmp_path, step)
    assert [p.name for p in complete_checkpoints(tmp_path)] == ["step-00000002", "step-00000003"]
    meta = json.loads((tmp_path / "step-00000003" / "learner.json").read_text())
    assert meta["reference_model"] == str(model_dir.resolve()) and meta["updates"] == 1
    assert (tmp_path / "step-00000003" / "hf" / "config.json").is_file()
    assert not list(tmp_path.glob(".tmp-*"))


def test_reload_restores_the_weights_and_optimizer_exactly(model_dir: Path, tmp_path: Path) -> None:
    learner = _trained(model_dir)
    path = learner.save_checkpoint(tmp_path, 1)
    fresh = GRPOLearner(LearnerConfig(lr=1e-2), model_dir)
    assert fresh.load_checkpoint(path) == 1 and fresh.updates == 1
    assert all(torch.equal(a, b) for a, b in zip(parameters(learner).values(), parameters(fresh).values(), strict=True))
    groups = make_groups(2, 2, seed=10)
    for one in (learner, fresh):
        one.update(groups, advantages_of(groups), np.array([0.5, 0.5]))
    for (name, a), b in zip(parameters(learner).items(), parameters(fresh).values(), strict=True):
        assert torch.equal(a, b), name


def test_a_checkpoint_of_another_reference_model_is_refused(model_dir: Path, tmp_path: Path) -> None:
    path = _trained(model_dir).save_checkpoint(tmp_path / "ckpt", 1)
    other = GRPOLearner(LearnerConfig(), tiny_model_dir(tmp_path / "other", seed=1))
    with pytest.raises(ValueError, match="trained from reference model"):
        other.load_checkpoint(path)


@pytest.mark.parametrize("zero_stage", [0, 2])
def test_export_writes_a_model_directory_transformers_loads(model_dir: Path, tmp_path: Path, zero_stage: int) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    learner = _trained(model_dir, zero_stage=zero_stage)
    run_dir = tmp_path / "run"
    learner.save_checkpoint(run_dir / "checkpoints" / "learner", 7)
    out = tmp_path / "exported"
    assert main(["export", str(run_dir), str(out)]) == 0
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in out.iterdir()}
    model = AutoModelForCausalLM.from_pretrained(str(out))
    trained = parameters(learner)
    for name, value in model.named_parameters():
        assert torch.equal(value, trained[name]), name
    assert AutoTokenizer.from_pretrained(str(out))("w5 w7")["input_ids"] == [5, 7]


def test_export_of_a_missing_step_names_the_available_ones(model_dir: Path, tmp_path: Path, capsys) -> None:
    run_dir = tmp_path / "run"
    _trained(model_dir).save_checkpoint(run_dir / "checkpoints" / "learner", 3)
    assert main(["export", str(run_dir), "--step", "5", str(tmp_path / "out")]) == 2
    assert "no complete learner checkpoint of step 5; available steps: 3" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_export_never_overwrites_an_existing_directory(model_dir: Path, tmp_path: Path, capsys) -> None:
    run_dir = tmp_path / "run"
    _trained(model_dir).save_checkpoint(run_dir / "checkpoints" / "learner", 1)
    out = tmp_path / "mine"
    out.mkdir()
    (out / "keep.txt").write_text("user data")
    assert main(["export", str(run_dir), str(out)]) == 2
    assert "not an empty directory" in capsys.readouterr().err
    assert (out / "keep.txt").read_text() == "user data"
