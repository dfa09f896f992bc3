"""The colocated placement's schedule: a real DeepSpeed learner (ZeRO-2 and ZeRO-3 on CPU, with the KL
reference) whose states go to host memory around generation and come back for training, bit-identical
to a learner that never moved; the vLLM side is a stand-in that checks each call against the state vLLM
requires (no GPU or vLLM here).

On a CPU the learner keeps torch's AdamW, so at ZeRO-3 DeepSpeed moves the bf16/gradient partitions and
the gradient bucket but not the fp32 master weights and Adam states (engine.offloadable_states); the
slow test builds DeepSpeed's FusedAdam (its CPU op, JIT-compiled once) and moves everything, as on a GPU.
What only a GPU shows (the bytes leaving the GPU, FusedAdam's CUDA op): scripts/gpu_probe_offload.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from learner_support import advantages_of, make_groups, tiny_model_dir

from wmrl.generation.base import Generation, SamplingParams
from wmrl.generation.colocation import Colocation, place
from wmrl.generation.config import GenerationConfig, VLLMConfig
from wmrl.learner import engine as engine_module
from wmrl.learner.config import LearnerConfig
from wmrl.learner.engine import optimizer_kind
from wmrl.learner.grpo import GRPOLearner


class FakeSleepingVLLM:
    """The vLLM side of the schedule: a sleeping engine may not generate or take weights, a generation
    must find the learner's states in host memory (DeepSpeed's ``offloaded_states``), an update must
    find vLLM's weights awake (``wake_up(["weights"])``, as vLLM's executor tracks ``sleeping_tags``)."""

    tokenizer = None

    def __init__(self, learner: GRPOLearner) -> None:
        self.learner, self.asleep, self.calls = learner, set(), []
        self.weights: dict[str, torch.Tensor] = {}

    def sleep(self) -> None:
        assert not self.asleep, "vLLM: Executor is already sleeping"
        self.asleep = {"weights", "kv_cache"}
        self.calls.append("sleep")

    def wake_up(self, tags) -> None:
        assert set(tags) <= self.asleep, f"vLLM: tags {tags} are not in sleeping tags {self.asleep}"
        self.asleep -= set(tags)
        self.calls.append(f"wake_up{list(tags)}")

    def generate(self, prompts, params, seeds=None):
        assert not self.asleep, "generate on a sleeping engine"
        assert self.learner.engine.optimizer.offloaded_states, "the learner's states are still on the GPU"
        assert reference_in_host_buffer(self.learner) in (None, True), "the reference is still on the GPU"
        self.calls.append("generate")
        return [Generation([1], [-0.1], "x", "stop", 0.0) for _ in prompts]

    def update_weights(self, named) -> None:
        assert "weights" not in self.asleep, "update_weights with vLLM's weights asleep"
        assert not self.learner.engine.optimizer.offloaded_states, "the IPC source is in host memory"
        assert reference_in_host_buffer(self.learner) in (None, False), "the reference did not come back"
        self.weights = {name: t.detach().clone() for name, t in named}
        self.calls.append("update_weights")


def reference_in_host_buffer(learner: GRPOLearner) -> bool | None:
    """Whether every partition of the ZeRO-3 reference lies in the learner's host buffer (None below
    ZeRO-3); the offload must move the partitions themselves (a partitioned parameter's ``.data`` is empty)."""
    moved = learner.reference_partitions
    if moved is None:
        return None
    if moved.host is None:
        return False
    start, end = moved.host.data_ptr(), moved.host.data_ptr() + moved.nbytes
    inside = [start <= t.data_ptr() < end for t in moved.partitions]
    assert all(inside) or not any(inside), "some partitions moved and others did not"
    return all(inside)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_model_dir(tmp_path_factory.mktemp("colocation") / "model")


def params(learner) -> dict[str, torch.Tensor]:
    return {name: t.detach().clone() for name, t in learner.named_parameters()}


def run_colocated_schedule(cfg: LearnerConfig, model_dir: Path) -> GRPOLearner:
    """Two steps of generate / update / weight sync through place() against a learner that never moves."""
    plain = GRPOLearner(cfg, model_dir)
    colocated_learner = GRPOLearner(cfg, model_dir)
    gen_cfg = GenerationConfig(backend="vllm", vllm=VLLMConfig(placement="colocated", sleep_level=1))
    fake = FakeSleepingVLLM(colocated_learner)
    learner, generator = place(colocated_learner, lambda: fake, gen_cfg)
    assert colocated_learner.engine.optimizer.offloaded_states  # before vLLM starts and checks free memory

    for step in range(2):
        groups = make_groups(2, 2, seed=step)
        adv, weights = advantages_of(groups, seed=step), np.full(2, 0.5)
        generator.generate([[1, 2]], SamplingParams())
        learner.update(groups, adv, weights)
        generator.update_weights(learner.named_parameters())
        plain.update(groups, adv, weights)
        ours, reference = params(learner), params(plain)
        assert ours.keys() == reference.keys()
        assert all(torch.equal(ours[k], reference[k]) for k in ours), f"step {step}: training differs"
        assert all(torch.equal(fake.weights[k], reference[k]) for k in reference), "vLLM got other weights"
    assert fake.calls == ["generate", "sleep", "wake_up['weights']", "update_weights",
                          "wake_up['kv_cache']", "generate", "sleep", "wake_up['weights']", "update_weights"]
    colocation: Colocation = generator.colocation
    assert colocation.seconds["offload"] > 0 and colocation.seconds["reload"] > 0
    return colocated_learner


@pytest.mark.parametrize("zero_stage", [2, 3])
def test_colocated_schedule_offloads_around_generation_and_trains_bit_identically(
        model_dir: Path, zero_stage: int) -> None:
    """ZeRO-3 with torch's AdamW: DeepSpeed's stage3.py refused it ("Offloading is supported only for
    DeepSpeed FusedAdam") at the first place(); the partitions that may move now move, the rest stay."""
    cfg = LearnerConfig(lr=1e-3, zero_stage=zero_stage, zero3_persistence_threshold=0)
    learner = run_colocated_schedule(cfg, model_dir)
    assert learner.cfg.kl_coef > 0 and learner.reference is not None  # the reference went and came back too
    if zero_stage == 3:
        assert learner.reference_partitions is not None and learner.reference_partitions.nbytes > 0
        learner.offload_states()
        assert {s.value for s in learner.engine.optimizer.offloaded_states} == {
            "lp_params", "lp_grads", "contiguous_grad_buffer"}  # torch AdamW: master weights and moments stay
        learner.reload_states()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_zero3_with_deepspeeds_fused_adam_moves_every_state_and_trains_bit_identically(
        model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU's choice at ZeRO-3 (DeepSpeed's FusedAdam), here with its CPU op (JIT-built once, minutes on
    a small machine): offload_states passes stage3.py's assertion and moves the fp32 master weights and
    the Adam moments as well."""
    from deepspeed.ops.adam import FusedAdam

    monkeypatch.setattr(engine_module, "optimizer_kind", lambda cfg, accelerator: "fused_adam")
    cfg = LearnerConfig(lr=1e-3, zero_stage=3, zero3_persistence_threshold=0)
    learner = run_colocated_schedule(cfg, model_dir)
    assert type(learner.engine.optimizer.optimizer) is FusedAdam
    learner.offload_states()
    assert {s.value for s in learner.engine.optimizer.offloaded_states} == {
        "hp_params", "optim_states", "lp_params", "lp_grads", "contiguous_grad_buffer"}
    learner.reload_states()


def test_the_optimizer_is_deepspeeds_fused_adam_only_where_zero3_keeps_it_on_a_gpu() -> None:
    assert optimizer_kind(LearnerConfig(zero_stage=3), "cuda") == "fused_adam"
    assert optimizer_kind(LearnerConfig(zero_stage=3), "cpu") == "adamw"  # nothing compiled on a CPU
    assert optimizer_kind(LearnerConfig(zero_stage=3, offload_optimizer=True), "cuda") == "adamw"  # steps on host
    assert optimizer_kind(LearnerConfig(zero_stage=2), "cuda") == "adamw"  # ZeRO-2 offloads any optimizer
    assert optimizer_kind(LearnerConfig(zero_stage=3, optimizer="sgd", weight_decay=0.0), "cuda") == "sgd"


def test_the_zero3_reference_leaves_in_its_partitions_not_in_module_to(model_dir: Path) -> None:
    """Module.to moves a ZeRO-3 engine's .data, which is empty: the partitions are what holds memory.
    With the default persistence threshold every parameter of the tiny model is kept whole after a
    forward: those copies are released too."""
    learner = GRPOLearner(LearnerConfig(zero_stage=3), model_dir)
    params = list(learner.reference.module.parameters())
    assert sum(p.data.numel() for p in params) == 0
    with torch.no_grad():
        for _ in range(2):  # ZeRO-3 keeps persistent parameters once its trace is complete (2nd forward)
            learner.reference(input_ids=torch.tensor([[1, 2, 3]]))
    assert sum(p.data.numel() for p in params) > 0  # persistent parameters stay gathered on the device
    moved = learner.reference_partitions
    before = [t.clone() for t in moved.partitions]
    assert moved.nbytes == sum(p.ds_numel for p in params) * params[0].ds_tensor.element_size()  # one rank
    learner.offload_states()
    assert reference_in_host_buffer(learner) is True
    assert sum(p.data.numel() for p in params) == 0
    learner.reload_states()
    assert reference_in_host_buffer(learner) is False
    assert all(torch.equal(a, b) for a, b in zip(before, moved.partitions, strict=True))


def test_colocated_with_parameter_offload_is_refused_with_the_key(model_dir: Path) -> None:
    learner = GRPOLearner(LearnerConfig(zero_stage=3, offload_params=True, kl_coef=0.0), model_dir)
    with pytest.raises(ValueError, match=r"learner.offload_params=true"):
        learner.offload_states()


def test_a_learner_without_zero_cannot_offload_and_says_what_to_set(model_dir: Path) -> None:
    learner = GRPOLearner(LearnerConfig(zero_stage=0), model_dir)
    with pytest.raises(ValueError, match=r"learner.zero_stage >= 1 \(got 0\)"):
        learner.offload_states()


def test_dedicated_or_non_sleeping_placements_leave_learner_and_generator_as_they_are() -> None:
    sentinel_learner, sentinel_generator = object(), object()
    for cfg in (GenerationConfig(backend="vllm", vllm=VLLMConfig(placement="dedicated", inference_gpus=1)),
                GenerationConfig(backend="vllm", vllm=VLLMConfig(sleep_level=0)), GenerationConfig()):
        assert place(sentinel_learner, lambda: sentinel_generator, cfg) == (sentinel_learner, sentinel_generator)


def test_a_colocated_vllm_that_never_sleeps_is_a_valid_config() -> None:
    """sleep_level 0 (both fit on the GPU at once) loads: a duplicated SLEEP_LEVELS = (1, 2) refused it."""
    from wmrl.config import load_config

    assert load_config(None, ["generation.vllm.sleep_level=0"]).generation.vllm.sleep_level == 0
