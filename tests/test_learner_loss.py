"""The pieces of the GRPO loss that need no engine: coefficients, log-probs, batching, config."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from learner_support import make_groups

from wmrl.config import ConfigError, load_config
from wmrl.learner.batch import Row, collate, micro_batches, shard
from wmrl.learner.head import token_log_probs
from wmrl.learner.loss import loss_coefficients


def _lengths(groups):
    return [[sum(t.loss_mask()) for t in g] for g in groups]


def test_seq_mean_token_mean_gives_each_trajectory_weight_over_n_times_its_length() -> None:
    groups = make_groups(2, 3)
    coefs = loss_coefficients(groups, np.array([0.7, 0.3]), "seq-mean-token-mean", 100)
    for k, w in enumerate([0.7, 0.3]):
        for i, length in enumerate(_lengths(groups)[k]):
            assert coefs[k][i] == pytest.approx(w / (3 * length))


def test_token_mean_spreads_the_group_weight_over_its_generated_tokens() -> None:
    groups = make_groups(2, 3)
    coefs = loss_coefficients(groups, np.array([0.7, 0.3]), "token-mean", 100)
    for k, w in enumerate([0.7, 0.3]):
        total = sum(c * n for c, n in zip(coefs[k], _lengths(groups)[k], strict=True))
        assert total == pytest.approx(w)
        assert len(set(coefs[k])) == 1


def test_dr_grpo_divides_token_sums_by_the_constant_budget() -> None:
    groups = make_groups(1, 4)
    coefs = loss_coefficients(groups, np.array([1.0]), "seq-mean-token-sum-norm", 512)
    assert coefs == [[1.0 / (4 * 512)] * 4]


def test_a_group_with_weight_zero_gets_no_loss() -> None:
    groups = make_groups(2, 2)
    coefs = loss_coefficients(groups, np.array([1.0, 0.0]), "seq-mean-token-mean", 100)
    assert coefs[1] == [0.0, 0.0] and all(c > 0 for c in coefs[0])


def test_a_trajectory_without_generated_tokens_gets_no_loss() -> None:
    groups = make_groups(1, 2)
    for turn in groups[0][1].turns:
        turn.generated_ids, turn.logprobs = [], []
    coefs = loss_coefficients(groups, np.array([1.0]), "seq-mean-token-mean", 100)
    assert coefs[0][1] == 0.0 and coefs[0][0] > 0


def test_token_log_probs_and_entropy_match_their_definitions() -> None:
    logits = torch.randn(2, 5, 7)
    targets = torch.randint(0, 7, (2, 5))
    logp, entropy = token_log_probs(logits, targets)
    probs = torch.softmax(logits, -1)
    assert torch.allclose(logp, probs.gather(-1, targets[..., None])[..., 0].log(), atol=1e-6)
    assert torch.allclose(entropy, -(probs * probs.log()).sum(-1), atol=1e-6)
    _, uniform = token_log_probs(torch.zeros(1, 1, 7), torch.zeros(1, 1, dtype=torch.long))
    assert uniform.item() == pytest.approx(math.log(7))


def test_row_rejects_a_turn_whose_log_probs_do_not_match_its_tokens() -> None:
    traj = make_groups(1, 1)[0][0]
    traj.turns[1].logprobs = traj.turns[1].logprobs[:-1]
    with pytest.raises(ValueError, match="group 0, index 0.*log-probs"):
        Row.from_trajectory(traj, 0.5, 1.0)


def test_shards_cover_every_row_exactly_once() -> None:
    rows = [Row([0] * (i + 2), [0] + [1] * (i + 1), [0.0] * (i + 2), 0.0, 1.0) for i in range(7)]
    dealt = [r for rank in range(3) for r in shard(rows, rank, 3)]
    assert sorted(r.length for r in dealt) == sorted(r.length for r in rows)
    assert [len(mb) for mb in micro_batches(shard(rows, 0, 1), 3)] == [3, 3, 1]


def test_collate_shifts_the_loss_mask_to_the_predicting_position() -> None:
    row = Row([5, 6, 7, 8], [0, 0, 1, 1], [0.0, 0.0, -1.0, -2.0], 0.5, 1.0)
    short = Row([5, 9], [0, 1], [0.0, -3.0], -0.5, 1.0)
    t = collate([row, short], pad_id=0, device=torch.device("cpu"))
    assert t.input_ids.tolist() == [[5, 6, 7, 8], [5, 9, 0, 0]]
    assert t.target_mask.tolist() == [[0, 1, 1], [1, 0, 0]]
    assert t.sampler_logprobs.tolist() == [[0.0, -1.0, -2.0], [-3.0, 0.0, 0.0]]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("learner.loss_agg=mean", "learner.loss_agg='mean' is not allowed"),
        ("learner.zero_stage=4", "learner.zero_stage=4 is not allowed"),
        ("learner.lr=0", "learner.lr=0.0 is out of range"),
        ("learner.policy_loss=ppo", "learner.policy_loss='ppo' is not allowed"),
        ("learner.micro_batch_size=0", "learner.micro_batch_size=0 is out of range"),
        ("learner.clip_eps=1.5", "learner.clip_eps=1.5 is out of range"),
    ],
)
def test_bad_learner_config_is_named_at_load_time(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        load_config(None, [override])


def test_learner_defaults_are_the_paper_constants() -> None:
    cfg = load_config().learner
    assert (cfg.lr, cfg.kl_coef, cfg.entropy_coef, cfg.temperature) == (1e-6, 0.04, 0.002, 1.0)
    assert cfg.loss_agg == "seq-mean-token-mean"
