"""ZeRO-3 on the Qwen3.5 hybrid architecture, in real processes: ``torchrun`` with 2 CPU ranks over gloo
against plain ``python`` for one rank (as tests/test_learner_distributed.py), on a tiny random-init
``Qwen3_5ForCausalLM`` with one Gated DeltaNet (``linear_attention``) and one ``full_attention`` layer.

Every ZeRO-3 run partitions every parameter (``zero3_persistence_threshold=0``), builds policy and
reference inside ``zero.Init`` (the learner refuses to start otherwise) and runs the reference as a
ZeRO-3 inference engine (``kl_coef`` > 0)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from learner_support import tiny_qwen3_5_dir
from safetensors.torch import load_file
from test_learner_distributed import _load, _run

from wmrl.learner.export import consolidated_state_dict

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

# Plain SGD with lr 1: the update is the clipped gradient itself, comparable at fp32 tolerance.
# 3 groups of 3: 9 trajectories, so in each update one rank has a micro-batch fewer and runs the idle
# pass (through the policy and the ZeRO-3 reference engine, whose gathers need every rank).
SGD = ["--updates", "2", "--micro", "2", "--group-size", "3", "--optimizer", "sgd", "--lr", "1.0"]
ZERO3 = ["--zero-stage", "3", "--persistence-threshold", "0"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_qwen3_5_dir(tmp_path_factory.mktemp("qwen3_5"))


@pytest.fixture(scope="module")
def one_rank(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One rank without ZeRO, all 9 trajectories accumulated over 5 micro-batches."""
    out = tmp_path_factory.mktemp("one") / "one.pt"
    _run(["--model", str(model_dir), "--zero-stage", "0", *SGD, "--out", str(out)])
    return out


@pytest.fixture(scope="module")
def zero3(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two ZeRO-3 ranks; checkpoint after the last update; the bucketed sync in ~10 kB buckets."""
    root = tmp_path_factory.mktemp("zero3")
    _run(["--model", str(model_dir), *ZERO3, *SGD, "--out", str(root / "two.pt"), "--ckpt-root", str(root / "ckpts"),
          "--save-after", "2", "--bucket-mb", "0.01", "--sync-out", str(root / "sync.pt")], ranks=2)
    return root


@pytest.fixture(scope="module")
def zero3_offload(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two ZeRO-3 ranks with optimizer and parameter offload and activation checkpointing."""
    out = tmp_path_factory.mktemp("offload") / "two.pt"
    _run(["--model", str(model_dir), *ZERO3, *SGD, "--offload-optimizer", "--offload-params",
          "--gradient-checkpointing", "--out", str(out)], ranks=2)
    return out


@pytest.fixture(scope="module")
def zero3_small_chunks(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two ZeRO-3 ranks whose micro-batches need different numbers of 4-token head chunks."""
    out = tmp_path_factory.mktemp("chunks") / "two.pt"
    _run(["--model", str(model_dir), *ZERO3, *SGD, "--loss-chunk-tokens", "4", "--out", str(out)], ranks=2)
    return out


def _assert_same_update(one_path: Path, two_path: Path) -> None:
    one, one_meta = _load(one_path)
    two, two_meta = _load(two_path)
    assert (one_meta["world_size"], two_meta["world_size"]) == (1, 2)
    assert [m["learner/micro_batches"] for m in one_meta["metrics"]] == [5, 5]
    assert [m["learner/micro_batches"] for m in two_meta["metrics"]] == [3, 3]  # 5 + 4 rows: one idle pass
    for a, b in zip(one_meta["metrics"], two_meta["metrics"], strict=True):
        assert a["learner/tokens"] == b["learner/tokens"]
        assert a["learner/loss"] == pytest.approx(b["learner/loss"], rel=1e-5, abs=1e-7)
        assert a["learner/kl"] == pytest.approx(b["learner/kl"], rel=1e-4, abs=1e-9)
    for name in one:
        moved = (one[name] - two[name]).abs().max()
        assert moved <= 1e-4 * (one[name]).abs().max() + 2e-7, name


def test_two_zero3_ranks_give_the_update_of_one_rank_with_accumulation(one_rank: Path, zero3: Path) -> None:
    _assert_same_update(one_rank, zero3 / "two.pt")


def test_ranks_with_different_head_chunk_counts_give_the_same_update(one_rank: Path, zero3_small_chunks: Path) -> None:
    # Each head call gathers the partitioned head: the ranks agree on the busiest rank's count (this hung).
    _assert_same_update(one_rank, zero3_small_chunks)


def test_optimizer_and_parameter_offload_give_the_same_update(one_rank: Path, zero3_offload: Path) -> None:
    _assert_same_update(one_rank, zero3_offload)


def test_every_parameter_of_both_layer_types_is_partitioned_and_moves(model_dir: Path, zero3: Path) -> None:
    initial = load_file(model_dir / "model.safetensors")
    trained, _ = _load(zero3 / "two.pt")
    local = torch.load(zero3 / "sync.pt")["local_numel"]
    assert set(trained) == set(initial)
    assert any(".linear_attn." in n for n in trained) and any(".self_attn." in n for n in trained)
    for name in trained:
        assert local[name] == 0, f"{name} is not partitioned outside a gather"
        assert (trained[name] - initial[name]).abs().max() > 0, f"{name} did not move"


def test_bucketed_weight_sync_delivers_the_unsharded_weights_in_the_generators_dtype(zero3: Path) -> None:
    sync = torch.load(zero3 / "sync.pt")
    full = consolidated_state_dict(zero3 / "ckpts" / "step-00000002")  # DeepSpeed's own zero_to_fp32
    assert sync["buckets"] > 5  # ~10 kB buckets of a 160 kB model: many gathers, not one per parameter
    assert sync["buckets"] < len(full)
    assert set(sync["tensors"]) == set(full)
    for name, tensor in sync["tensors"].items():
        assert tensor.dtype == torch.bfloat16, name
        assert torch.equal(tensor, full[name].to(torch.bfloat16)), name


def test_offloaded_zero3_resumes_from_its_partitioned_checkpoint_bit_identically(
        model_dir: Path, tmp_path: Path) -> None:
    # AdamW (torch's fused CPU kernel on the offloaded fp32 partitions): its moments must come back too.
    common = ["--model", str(model_dir), *ZERO3, "--offload-optimizer", "--updates", "2", "--micro", "2"]
    ckpts = tmp_path / "ckpts"
    _run([*common, "--out", str(tmp_path / "straight.pt"), "--ckpt-root", str(ckpts), "--save-after", "1"], ranks=2)
    # one optimizer partition per rank, written by that rank
    assert len(list((ckpts / "step-00000001").glob("*zero_pp_rank_*optim_states.pt"))) == 2
    _run([*common, "--out", str(tmp_path / "resumed.pt"), "--resume", str(ckpts / "step-00000001")], ranks=2)
    straight, straight_meta = _load(tmp_path / "straight.pt")
    resumed, resumed_meta = _load(tmp_path / "resumed.pt")
    for name in straight:
        assert torch.equal(straight[name], resumed[name]), name
    assert resumed_meta["metrics"][0]["learner/loss"] == straight_meta["metrics"][1]["learner/loss"]
    assert straight_meta["optimizer"]["fused"] is True  # torch's fused AdamW, stepping on the host


def _without_timing(metrics: list[dict]) -> list[dict]:
    return [{k: v for k, v in m.items() if k not in ("learner/seconds", "learner/peak_memory_mb")} for m in metrics]


def test_followers_repeat_rank0s_update_sync_and_checkpoint_calls(model_dir: Path, zero3: Path, tmp_path: Path) -> None:
    """Rank 1 runs no loop of its own: it gets each step's batch, the sync and the save from rank 0
    (wmrl/learner/follower.py), and the run is the data-parallel run where both ranks call them."""
    _run(["--model", str(model_dir), *ZERO3, *SGD, "--follow", "--out", str(tmp_path / "led.pt"),
          "--ckpt-root", str(tmp_path / "ckpts"), "--save-after", "2", "--bucket-mb", "0.01",
          "--sync-out", str(tmp_path / "sync.pt")], ranks=2)
    led, led_meta = _load(tmp_path / "led.pt")
    both, both_meta = _load(zero3 / "two.pt")
    for name in both:
        assert torch.equal(led[name], both[name]), name
    assert _without_timing(led_meta["metrics"]) == _without_timing(both_meta["metrics"])
    synced, reference = torch.load(tmp_path / "sync.pt"), torch.load(zero3 / "sync.pt")
    assert all(torch.equal(synced["tensors"][k], v) for k, v in reference["tensors"].items())
    assert len(list((tmp_path / "ckpts" / "step-00000002").glob("*zero_pp_rank_*optim_states.pt"))) == 2


def test_followers_load_the_checkpoint_rank0_resumes_from(model_dir: Path, zero3: Path, tmp_path: Path) -> None:
    # No update after the resume: the gathered weights are the checkpoint's only if every rank loaded its partition.
    _run(["--model", str(model_dir), *ZERO3, *SGD, "--follow", "--out", str(tmp_path / "resumed.pt"),
          "--resume", str(zero3 / "ckpts" / "step-00000002")], ranks=2)
    resumed, _ = _load(tmp_path / "resumed.pt")
    trained, _ = _load(zero3 / "two.pt")
    for name in trained:
        assert torch.equal(resumed[name], trained[name]), name
