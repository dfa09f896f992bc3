"""The colocated placement's schedule: a real DeepSpeed learner (ZeRO-2 on CPU) whose states go to host
memory around generation and come back for training, bit-identical to a learner that never moved; the
vLLM side is a stand-in that checks each call against the state vLLM requires (no GPU or vLLM here)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from learner_support import advantages_of, make_groups, tiny_model_dir

from wmrl.generation.base import Generation, SamplingParams
from wmrl.generation.colocation import Colocation, place
from wmrl.generation.config import GenerationConfig, VLLMConfig
from wmrl.learner.config import LearnerConfig
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
        self.calls.append("generate")
        return [Generation([1], [-0.1], "x", "stop", 0.0) for _ in prompts]

    def update_weights(self, named) -> None:
        assert "weights" not in self.asleep, "update_weights with vLLM's weights asleep"
        assert not self.learner.engine.optimizer.offloaded_states, "the IPC source is in host memory"
        self.weights = {name: t.detach().clone() for name, t in named}
        self.calls.append("update_weights")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_model_dir(tmp_path_factory.mktemp("colocation") / "model")


def params(learner) -> dict[str, torch.Tensor]:
    return {name: t.detach().clone() for name, t in learner.named_parameters()}


def test_colocated_schedule_offloads_around_generation_and_trains_bit_identically(model_dir: Path) -> None:
    cfg = LearnerConfig(lr=1e-3, zero_stage=2)
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
