"""The chunked LM head (wmrl/learner/head.py) against the full computation, and the tempered PPO
surrogate through the real learner (DeepSpeed on CPU, tiny random-init Qwen3)."""

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

from wmrl.learner import head
from wmrl.learner.config import LearnerConfig
from wmrl.learner.grpo import GRPOLearner

F64 = torch.float64


def _full_head(lm_head, hidden, targets, temperature):
    """Today's definition: logits at every position, log-softmax over the whole vocabulary at once."""
    logits = lm_head(hidden)
    logp, entropy = head.token_log_probs(logits / temperature, targets)
    raw = torch.log_softmax(logits, -1).gather(-1, targets[..., None])[..., 0]
    return logp, entropy, raw


def _batch(seed: int = 0, B: int = 3, T: int = 9, H: int = 16, V: int = 50):
    g = torch.Generator().manual_seed(seed)
    lm_head = torch.nn.Linear(H, V, bias=False, dtype=F64)
    with torch.no_grad():
        lm_head.weight.copy_(torch.randn(V, H, generator=g, dtype=F64))
    hidden = torch.randn(B, T, H, generator=g, dtype=F64, requires_grad=True)
    targets = torch.randint(0, V, (B, T), generator=g)
    where = torch.rand(B, T, generator=g) < 0.6  # the loss positions; the others are prompt or padding
    where[0, 0] = True
    # Arbitrary upstream weights on log-prob and entropy (what the loss does with them).
    a, c = torch.randn(B, T, generator=g, dtype=F64), torch.randn(B, T, generator=g, dtype=F64)
    return lm_head, hidden, targets, where, a, c


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("chunk", [1, 4, 6, 1000])  # 4 and 6 do not divide the 14 loss positions
def test_chunked_head_equals_the_full_head_in_value_and_gradient(chunk: int, temperature: float) -> None:
    lm_head, hidden, targets, where, a, c = _batch()
    logp, entropy, raw = _full_head(lm_head, hidden, targets, temperature)
    full_loss = (where * (a * logp + c * entropy)).sum()
    full_grads = torch.autograd.grad(full_loss, [hidden, lm_head.weight])

    got = head.policy_tokens(lm_head, hidden[where], targets[where], temperature, chunk)
    loss = (a[where] * got.logp + c[where] * got.entropy).sum()
    grads = torch.autograd.grad(loss, [hidden, lm_head.weight])

    assert int(where.sum()) == 14
    assert torch.allclose(got.logp, logp[where], rtol=0, atol=1e-12)
    assert torch.allclose(got.entropy, entropy[where], rtol=0, atol=1e-12)
    assert torch.allclose(got.raw_logp, raw[where], rtol=0, atol=1e-12) and not got.raw_logp.requires_grad
    assert loss.item() == pytest.approx(full_loss.item(), rel=1e-12)
    for got_grad, full_grad in zip(grads, full_grads, strict=True):
        assert torch.allclose(got_grad, full_grad, rtol=0, atol=1e-12)
    assert torch.equal(grads[0][~where], torch.zeros_like(grads[0][~where]))  # no loss, no gradient


def test_reference_log_probs_are_the_tempered_log_probs_without_a_graph() -> None:
    lm_head, hidden, targets, where, _, _ = _batch(seed=1)
    logp, _, _ = _full_head(lm_head, hidden, targets, 0.7)
    ref = head.reference_log_probs(lm_head, hidden[where], targets[where], 0.7, chunk_tokens=3)
    assert not ref.requires_grad
    assert ref.dtype == F64 and torch.allclose(ref, logp[where], rtol=0, atol=1e-12)


def test_a_micro_batch_without_loss_positions_gives_empty_tokens_still_on_the_graph() -> None:
    lm_head, hidden, targets, _, _, _ = _batch()
    none = torch.zeros(targets.shape, dtype=torch.bool)
    got = head.policy_tokens(lm_head, hidden[none], targets[none], 1.0, 4)
    assert got.logp.shape == (0,) and got.entropy.shape == (0,)
    got.logp.sum().backward()
    assert torch.equal(hidden.grad, torch.zeros_like(hidden))


def _tied_model(path: Path | None = None):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, max_position_embeddings=256, pad_token_id=0,
        tie_word_embeddings=True,
    )
    model = Qwen3ForCausalLM(config)
    if path is not None:
        model.save_pretrained(path)
    return model


def test_chunked_head_of_a_tied_embedding_model_equals_its_full_logits_in_value_and_gradient() -> None:
    model = _tied_model().to(F64)
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(1, 300, (2, 12), generator=g)
    attention = torch.ones_like(ids)
    attention[1, 9:] = 0  # right padding
    where = torch.zeros(2, 11, dtype=torch.bool)
    where[0, 4:] = True
    where[1, 3:8] = True
    targets = ids[:, 1:]

    logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1]
    logp, entropy = head.token_log_probs(logits / 0.7, targets)
    full = (logp[where] - 0.3 * entropy[where]).sum()
    full_grads = torch.autograd.grad(full, list(model.parameters()))

    hidden = head.final_hidden_states(model, ids, attention, where)
    got = head.policy_tokens(head.output_head(model), hidden, targets[where], 0.7, chunk_tokens=4)
    chunked = (got.logp - 0.3 * got.entropy).sum()
    grads = torch.autograd.grad(chunked, list(model.parameters()))

    assert chunked.item() == pytest.approx(full.item(), rel=1e-12)
    for (name, _), a, b in zip(model.named_parameters(), grads, full_grads, strict=True):
        assert torch.allclose(a, b, rtol=1e-9, atol=1e-12), name


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_model_dir(tmp_path_factory.mktemp("model"))


def test_ppo_clip_at_temperature_has_the_gradient_of_the_tempered_surrogate(model_dir: Path) -> None:
    """The sampler drew from softmax(z / T): the surrogate's ratio is pi_T / pi_T,old, and its gradient
    is that of the tempered log-probs (the bug: the gradient of the raw softmax(z), 44% off at T = 0.7)."""
    from transformers import AutoModelForCausalLM

    temperature, lr, weights = 0.7, 1.0, np.array([0.6, 0.4])
    groups = make_groups(2, 2, seed=12)
    with_policy_logprobs(groups, model_dir)  # an exact sampler: pi_old = pi (raw log-probs, as generators report)
    adv = advantages_of(groups)

    cfg = LearnerConfig(lr=lr, optimizer="sgd", grad_clip=0.0, kl_coef=0.0, entropy_coef=0.0,
                        policy_loss="ppo_clip", clip_eps=0.2, temperature=temperature, loss_chunk_tokens=5)
    learner = GRPOLearner(cfg, model_dir)
    before = parameters(learner)
    learner.update(groups, adv, weights)
    delta = {k: v - before[k] for k, v in parameters(learner).items()}

    # The surrogate from its definition, float64: -min(r A, clip(r, 1 +- eps) A), r = pi_T / pi_T,old with
    # the old policy the current one (detached); loss_agg seq-mean-token-mean: w_k / (n L_i) per trajectory.
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=F64)
    loss = torch.zeros((), dtype=F64)
    for k, group in enumerate(groups):
        for i, traj in enumerate(group):
            ids = torch.tensor(traj.token_ids())
            mask = torch.tensor(traj.loss_mask()[1:], dtype=F64)
            logits = model(input_ids=ids[None]).logits[0, :-1] / temperature
            logp = torch.log_softmax(logits, -1).gather(-1, ids[1:, None])[:, 0]
            ratio = torch.exp(logp - logp.detach())
            a = float(adv[k, i])
            surrogate = -torch.minimum(ratio * a, ratio.clamp(0.8, 1.2) * a)
            loss = loss + weights[k] / (len(group) * mask.sum()) * (mask * surrogate).sum()
    loss.backward()
    for name, p in model.named_parameters():
        expected = -lr * p.grad
        error, scale = float((delta[name].double() - expected).abs().max()), float(expected.abs().max())
        assert error <= 1e-3 * scale + 1e-7, f"{name}: update off by {error:.3g} (largest entry {scale:.3g})"


def test_chunked_head_under_zero3_with_tied_embeddings_gives_the_one_chunk_zero2_update(tmp_path: Path) -> None:
    # ZeRO-3 gathers the partitioned (tied) head weight in the module's forward, also when backward
    # recomputes a chunk; one rank on CPU. The update must equal ZeRO-2's with the head in one chunk.
    _tied_model(tmp_path / "tied")
    groups = make_groups(2, 2, seed=13)
    adv, weights = advantages_of(groups), np.array([0.7, 0.3])
    deltas = []
    for stage, chunk in [(2, 10**6), (3, 5)]:
        cfg = LearnerConfig(lr=1.0, optimizer="sgd", grad_clip=0.0, zero_stage=stage, loss_chunk_tokens=chunk,
                            temperature=0.7, kl_coef=0.04, entropy_coef=0.01)
        learner = GRPOLearner(cfg, tmp_path / "tied")
        before = parameters(learner)
        metrics = learner.update(groups, adv, weights)
        deltas.append({k: v - before[k] for k, v in parameters(learner).items()})
        assert metrics["learner/kl"] == pytest.approx(0.0, abs=1e-7)  # the reference path ran: pi = pi_ref
    two, three = deltas
    assert two.keys() == three.keys() and "model.embed_tokens.weight" in two
    for name in two:
        assert (two[name] - three[name]).abs().max() <= 1e-4 * two[name].abs().max() + 1e-7, name
    assert two["model.embed_tokens.weight"].abs().max() > 1e-4
