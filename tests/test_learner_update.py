"""The GRPO + WMRL update on a real DeepSpeed engine (CPU, one rank) and a tiny random-init Qwen3."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from learner_support import (
    advantages_of,
    make_groups,
    parameters,
    tiny_model_dir,
    with_policy_logprobs,
)

from wmrl.learner.config import LearnerConfig
from wmrl.learner.grpo import GRPOLearner


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_model_dir(tmp_path_factory.mktemp("model"))


def _delta(model_dir: Path, cfg: LearnerConfig, groups, adv, weights) -> dict[str, torch.Tensor]:
    learner = GRPOLearner(cfg, model_dir)
    before = parameters(learner)
    learner.update(groups, adv, np.asarray(weights, dtype=float))
    return {k: v - before[k] for k, v in parameters(learner).items()}


def test_update_is_the_weighted_sum_of_per_group_updates(model_dir: Path) -> None:
    # Plain SGD without clipping: the update is -lr * gradient, so Eq. 5's fusion must be linear in w_k.
    cfg = LearnerConfig(lr=1.0, optimizer="sgd", grad_clip=0.0, micro_batch_size=2)
    groups = make_groups(3, 3, seed=2)
    adv = advantages_of(groups)
    weights = np.array([0.5, 0.3, 0.2])
    fused = _delta(model_dir, cfg, groups, adv, weights)
    parts = [_delta(model_dir, cfg, groups, adv, np.eye(3)[k]) for k in range(3)]
    for name, value in fused.items():
        expected = sum(w * part[name] for w, part in zip(weights, parts, strict=True))
        # float32 rounding of (after - before) is ~1e-7 on the norm weights (which are ~1.0)
        assert (value - expected).abs().max() <= 1e-3 * value.abs().max() + 2e-7, name
    assert max(v.abs().max().item() for v in fused.values()) > 1e-4  # the update is not trivially zero


def test_micro_batch_size_does_not_change_the_update(model_dir: Path) -> None:
    # SGD: Adam's first step is lr * sign(g), which float noise flips where g is ~0.
    groups = make_groups(2, 4, seed=3)
    adv = advantages_of(groups)
    sgd = {"lr": 1.0, "optimizer": "sgd"}
    one = _delta(model_dir, LearnerConfig(**sgd, micro_batch_size=1), groups, adv, [0.6, 0.4])
    all_at_once = _delta(model_dir, LearnerConfig(**sgd, micro_batch_size=8), groups, adv, [0.6, 0.4])
    for name in one:
        assert (one[name] - all_at_once[name]).abs().max() <= 1e-3 * one[name].abs().max() + 2e-7, name


def test_groups_with_weight_zero_leave_the_weights_unchanged(model_dir: Path) -> None:
    learner = GRPOLearner(LearnerConfig(lr=1e-2), model_dir)
    before = parameters(learner)
    groups = make_groups(2, 2)
    metrics = learner.update(groups, advantages_of(groups), np.zeros(2))
    assert metrics["learner/trajectories"] == 0
    assert all(torch.equal(before[k], v) for k, v in parameters(learner).items())
    assert learner.updates == 0


def test_positive_advantage_raises_the_trajectory_log_prob(model_dir: Path) -> None:
    learner = GRPOLearner(LearnerConfig(lr=3e-3, kl_coef=0.0, entropy_coef=0.0), model_dir)
    groups = make_groups(1, 2, seed=4)
    adv = np.array([[0.5, -0.5]])

    def seq_logp(traj) -> float:
        ids = torch.tensor([traj.token_ids()])
        mask = torch.tensor(traj.loss_mask()[1:], dtype=torch.float32)
        with torch.no_grad():
            logits = learner.engine.module(input_ids=ids).logits[0, :-1]
        lp = torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None])[:, 0]
        return float((lp * mask).sum())

    start = [seq_logp(t) for t in groups[0]]
    for _ in range(5):
        learner.update(groups, adv, np.array([1.0]))
    end = [seq_logp(t) for t in groups[0]]
    assert end[0] > start[0] and end[1] < start[1]


def test_kl_to_the_reference_grows_as_the_policy_moves(model_dir: Path) -> None:
    learner = GRPOLearner(LearnerConfig(lr=3e-3, kl_coef=0.04), model_dir)
    groups = make_groups(1, 2, seed=5)
    adv, w = np.array([[0.5, -0.5]]), np.array([1.0])
    first = learner.update(groups, adv, w)
    for _ in range(3):
        later = learner.update(groups, adv, w)
    assert first["learner/kl"] == pytest.approx(0.0, abs=1e-7)  # the policy starts as the reference
    assert later["learner/kl"] > 1e-5


def test_importance_ratio_is_one_on_policy_and_flags_a_drifted_sampler(model_dir: Path) -> None:
    learner = GRPOLearner(LearnerConfig(lr=1e-6), model_dir)
    groups = make_groups(2, 2, seed=6)
    with_policy_logprobs(groups, model_dir)
    adv, w = advantages_of(groups), np.array([0.5, 0.5])
    on_policy = learner.update(groups, adv, w)
    assert on_policy["learner/ratio_mean_abs_dev"] < 1e-4
    for group in groups:
        for traj in group:
            for turn in traj.turns:
                turn.logprobs = [lp - 0.2 for lp in turn.logprobs]  # the sampler saw each token 0.2 nats less likely
    drifted = learner.update(groups, adv, w)
    assert drifted["learner/ratio_mean_abs_dev"] == pytest.approx(np.exp(0.2) - 1, rel=1e-2)


def test_ppo_clip_counts_tokens_outside_the_trust_region(model_dir: Path) -> None:
    learner = GRPOLearner(LearnerConfig(lr=1e-6, policy_loss="ppo_clip", clip_eps=0.2), model_dir)
    groups = make_groups(1, 4, seed=7)
    with_policy_logprobs(groups, model_dir)
    assert learner.update(groups, advantages_of(groups), np.array([1.0]))["learner/clip_frac"] == 0.0
    for traj in groups[0]:
        for turn in traj.turns:
            turn.logprobs = [lp - 1.0 for lp in turn.logprobs]  # ratio e = 2.7 on every token
    metrics = learner.update(groups, advantages_of(groups), np.array([1.0]))
    # min(rA, clip(r)A) takes the clipped branch exactly where A > 0: half the trajectories here.
    assert 0.0 < metrics["learner/clip_frac"] < 1.0


def test_update_records_its_seconds_tokens_and_peak_memory(model_dir: Path) -> None:
    learner = GRPOLearner(LearnerConfig(lr=1e-4), model_dir)
    groups = make_groups(2, 2, seed=8)
    metrics = learner.update(groups, advantages_of(groups), np.array([0.5, 0.5]))
    assert metrics["learner/seconds"] > 0
    assert metrics["learner/peak_memory_mb"] > 50  # this process holds torch + a model
    assert metrics["learner/tokens"] == sum(sum(t.loss_mask()) for g in groups for t in g)
    assert np.isfinite(metrics["learner/grad_norm"])


def test_mismatched_advantages_are_refused_with_the_expected_shape(model_dir: Path) -> None:
    learner = GRPOLearner(LearnerConfig(), model_dir)
    groups = make_groups(2, 3)
    with pytest.raises(ValueError, match=r"expected \(G, n\) = \(2, 3\)"):
        learner.update(groups, np.zeros((2, 2)), np.array([0.5, 0.5]))


def test_the_ratio_compares_raw_log_probs_at_any_sampling_temperature(model_dir: Path) -> None:
    # The generators report raw log-probs (before temperature); the tempered policy still trains.
    learner = GRPOLearner(LearnerConfig(lr=1e-6, temperature=2.0), model_dir)
    groups = make_groups(1, 2, seed=11)
    with_policy_logprobs(groups, model_dir)
    metrics = learner.update(groups, advantages_of(groups), np.array([1.0]))
    assert metrics["learner/ratio_mean_abs_dev"] < 1e-4
    assert metrics["learner/entropy"] > 0
