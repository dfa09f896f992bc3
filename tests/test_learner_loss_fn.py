"""The per-token loss (wmrl/learner/loss.py) as a pure function of plain tensors: no model, no engine."""

from __future__ import annotations

import math

import pytest
import torch

from wmrl.learner.config import LearnerConfig
from wmrl.learner.loss import STAT_SUMS, token_loss

F64 = torch.float64


def _tokens(n: int = 6, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(n, generator=g, dtype=F64) * 4 - 0.1).requires_grad_(True)
    return {
        "logp": logp,
        "entropy": (torch.rand(n, generator=g, dtype=F64) * 3).requires_grad_(True),
        "sampler_logp": logp.detach().clone(),  # an exact on-policy sampler
        "advantages": torch.tensor([0.5, 0.5, 0.5, -0.25, -0.25, -0.25], dtype=F64)[:n],
        "coefs": torch.tensor([0.1, 0.1, 0.1, 0.2, 0.2, 0.2], dtype=F64)[:n],
    }


def _grad(out, tensor: torch.Tensor) -> torch.Tensor:
    return torch.autograd.grad(out.loss, tensor, retain_graph=True)[0]


def test_on_policy_loss_is_the_coefficient_weighted_score_function_minus_the_entropy_bonus() -> None:
    t = _tokens()
    cfg = LearnerConfig(kl_coef=0.0, entropy_coef=0.01)
    out = token_loss(**t, cfg=cfg)
    expected = (t["coefs"] * (-t["advantages"] * t["logp"] - 0.01 * t["entropy"])).sum()
    assert out.loss.item() == pytest.approx(expected.item(), rel=1e-12)
    assert torch.allclose(_grad(out, t["logp"]), -t["coefs"] * t["advantages"])
    assert torch.allclose(_grad(out, t["entropy"]), -0.01 * t["coefs"])  # a bonus: more entropy, less loss


def test_k3_kl_is_zero_with_zero_gradient_at_the_reference_and_positive_away_from_it() -> None:
    t = _tokens()
    cfg = LearnerConfig(kl_coef=0.5, entropy_coef=0.0)
    at_ref = token_loss(**t, cfg=cfg, ref_logp=t["logp"].detach().clone())
    on_policy = token_loss(**t, cfg=cfg)
    assert at_ref.total("kl") == 0.0
    assert torch.allclose(_grad(at_ref, t["logp"]), _grad(on_policy, t["logp"]))
    ref = t["logp"].detach() + torch.linspace(-1.0, 1.0, 6, dtype=F64)
    away = token_loss(**t, cfg=cfg, ref_logp=ref)
    delta = ref - t["logp"].detach()
    assert away.total("kl") == pytest.approx(float((delta.exp() - delta - 1).sum()), rel=1e-12)
    assert away.total("kl") > 0


def test_ppo_clip_on_policy_has_the_on_policy_gradient() -> None:
    t = _tokens()
    ppo = token_loss(**t, cfg=LearnerConfig(policy_loss="ppo_clip", kl_coef=0, entropy_coef=0))
    plain = token_loss(**t, cfg=LearnerConfig(kl_coef=0, entropy_coef=0))
    assert torch.allclose(_grad(ppo, t["logp"]), _grad(plain, t["logp"]))
    assert ppo.total("clipped") == 0.0 and ppo.total("ratio_dev") == 0.0


def test_ppo_clip_ratio_takes_its_value_from_raw_log_probs_and_its_gradient_from_the_tempered_ones() -> None:
    # The sampler saw every token 0.5 nats less likely (raw scale): r = e^0.5 = 1.65 > 1 + eps.
    t = _tokens()
    raw = t["logp"].detach() * 0.7 - 0.3  # any raw log-probs: only raw - sampler sets the ratio's value
    t["sampler_logp"] = raw - 0.5
    out = token_loss(**t, cfg=LearnerConfig(policy_loss="ppo_clip", clip_eps=0.2, kl_coef=0, entropy_coef=0),
                     raw_logp=raw)
    r = math.exp(0.5)
    assert out.ratio_max.item() == pytest.approx(r, rel=1e-12)
    assert out.total("ratio_dev") == pytest.approx(6 * (r - 1), rel=1e-12)
    # A > 0 (tokens 0-2): min(rA, 1.2A) takes the clipped branch, no gradient; A < 0: rA, gradient -c A r.
    assert out.total("clipped") == 3.0
    grad = _grad(out, t["logp"])
    assert torch.equal(grad[:3], torch.zeros(3, dtype=F64))
    assert torch.allclose(grad[3:], -t["coefs"][3:] * t["advantages"][3:] * r)
    assert out.total("pg") == pytest.approx(float(-(1.2 * 0.5) * 3 - (r * -0.25) * 3), rel=1e-12)


def test_at_temperature_one_the_ratio_is_exp_of_the_log_prob_difference() -> None:
    t = _tokens()
    t["sampler_logp"] = t["logp"].detach() + torch.linspace(-0.3, 0.3, 6, dtype=F64)
    out = token_loss(**t, cfg=LearnerConfig(policy_loss="ppo_clip", clip_eps=0.5, kl_coef=0, entropy_coef=0))
    ratio = torch.exp(t["logp"].detach() - t["sampler_logp"])
    assert out.ratio_max.item() == ratio.max().item()
    assert torch.allclose(_grad(out, t["logp"]), -t["coefs"] * t["advantages"] * ratio)


def test_masked_tokens_carry_no_loss_gradient_or_statistic() -> None:
    t = _tokens()
    cfg = LearnerConfig(kl_coef=0.1, entropy_coef=0.01)
    mask = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 1.0], dtype=F64)
    ref = t["logp"].detach() - 0.2
    masked = token_loss(**t, cfg=cfg, ref_logp=ref, mask=mask)
    keep = mask.bool()
    kept = token_loss(**{k: v[keep] for k, v in t.items()}, cfg=cfg, ref_logp=ref[keep])
    assert masked.loss.item() == pytest.approx(kept.loss.item(), rel=1e-12)
    assert torch.allclose(masked.sums, kept.sums)
    assert torch.equal(_grad(masked, t["logp"])[~keep], torch.zeros(2, dtype=F64))
    assert masked.total("tokens") == 4.0


def test_statistics_are_sums_in_the_documented_order() -> None:
    t = _tokens()
    out = token_loss(**t, cfg=LearnerConfig(kl_coef=0, entropy_coef=0))
    assert STAT_SUMS == ("pg", "kl", "entropy", "ratio_dev", "clipped", "tokens")
    assert out.sums.dtype == torch.float64 and not out.sums.requires_grad
    assert out.total("entropy") == pytest.approx(float(t["entropy"].detach().sum()), rel=1e-12)
    assert out.total("pg") == pytest.approx(float((-t["advantages"] * t["logp"].detach()).sum()), rel=1e-12)
    assert out.total("tokens") == 6.0


def test_no_tokens_give_a_zero_loss_and_a_zero_ratio_max() -> None:
    t = {k: v[:0] for k, v in _tokens().items()}
    out = token_loss(**t, cfg=LearnerConfig())
    assert out.loss.item() == 0.0 and out.ratio_max.item() == 0.0 and out.total("tokens") == 0.0


def test_a_tensor_of_the_wrong_shape_is_named() -> None:
    t = _tokens()
    t["advantages"] = t["advantages"][:, None]
    with pytest.raises(ValueError, match=r"advantages has shape \(6, 1\), logp has \(6,\)"):
        token_loss(**t, cfg=LearnerConfig())


def test_a_loss_chunk_below_one_token_is_refused_at_load_time() -> None:
    from wmrl.config import ConfigError, load_config

    assert load_config().learner.loss_chunk_tokens == 4096
    with pytest.raises(ConfigError, match=r"learner.loss_chunk_tokens=0 is out of range; allowed: \[1, inf\)"):
        load_config(None, ["learner.loss_chunk_tokens=0"])
