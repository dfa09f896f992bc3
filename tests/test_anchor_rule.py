"""The anchor rule (issue 37, ``wmrl/anchor_rule.py``): fixed vs adaptive, its variance derivation, the
config keys, the loop shell taking the count from it, the flat_top audit check and its responses,
and the exact resume of its inputs."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from wmrl.algorithm import n_anchor_groups
from wmrl.anchor_rule import RuleInputs, decide, variance_groups
from wmrl.calibration.audit import AuditThresholds, audit_pool
from wmrl.calibration.calibrator import Calibrator
from wmrl.calibration.pool import AnchorPair
from wmrl.config import AlgorithmConfig, ConfigError, load_config
from wmrl.loop import LoopShell
from wmrl.simulate.simulator import simulated_parts

CAL = RuleInputs(warmed_up=True, eta2=0.2, eta2_cal=0.2)


def fused_variance(rho: float, m: int, k: int) -> float:
    """Var of (rho g_E + g_WM) / (rho k + m - k) in units of V_E (Eq. 5, per-group variances V_E, rho V_E)."""
    return (rho**2 * k + rho * (m - k)) / (rho * k + m - k) ** 2


@pytest.mark.parametrize("m,frac,low", [(8, 0.1, 1), (10, 0.3, 1), (20, 0.2, 2), (5, 1.0, 0)])
def test_fixed_rule_is_round_anchor_frac_whatever_the_state(m, frac, low):
    k0 = n_anchor_groups(m, frac, low)
    for state in (None, CAL, RuleInputs(True, 5.0, 0.1, ("monotonicity", "coverage"))):
        assert decide("fixed", m, frac, low, 4.0, state).groups == k0


@pytest.mark.parametrize("m,k0", [(8, 1), (20, 4), (16, 2), (40, 4)])
@pytest.mark.parametrize("rho", [1.0, 1.1, 1.5, 2.0, 2.5, 3.0, 4.0, 8.0])
def test_adaptive_count_is_the_fewest_that_keep_the_fixed_rules_variance_at_warm_up_noise(m, k0, rho):
    k = variance_groups(rho, m, k0)
    target = fused_variance(2.0, m, k0)
    if k < m:
        assert fused_variance(rho, m, k) <= target + 1e-12
    if k > 0:
        assert fused_variance(rho, m, k - 1) > target - 1e-12 or rho == 1.0
    assert (k == k0) if rho == 2.0 else ((k <= k0) if rho < 2.0 else (k >= k0))


def test_adaptive_takes_fewer_anchors_when_precise_more_when_eta2_rises_never_outside_min_and_m():
    m, frac, low = 20, 0.2, 2  # k0 = 4
    precise = decide("adaptive", m, frac, low, 4.0, RuleInputs(True, 0.02, 0.2))
    usual = decide("adaptive", m, frac, low, 4.0, CAL)
    noisy = decide("adaptive", m, frac, low, 4.0, RuleInputs(True, 0.6, 0.2))
    very = decide("adaptive", m, frac, low, 4.0, RuleInputs(True, 1e6, 1e-6))
    assert precise.groups == low and precise.reason == "variance"
    assert usual.groups == 4
    assert noisy.groups > 4
    assert low <= very.groups <= m


def test_adaptive_is_the_fixed_rule_in_warm_up_and_reacts_to_the_audit():
    m, frac, low = 20, 0.2, 1
    assert decide("adaptive", m, frac, low, 4.0, RuleInputs(False, None, None)).reason == "warm-up"
    assert decide("adaptive", m, frac, low, 4.0, RuleInputs(False, None, None)).groups == 4
    base = decide("adaptive", m, frac, low, 4.0, RuleInputs(True, 0.02, 0.2))
    broken = decide("adaptive", m, frac, low, 4.0, RuleInputs(True, 0.02, 0.2, ("stationarity",)))
    starved = decide("adaptive", m, frac, low, 4.0, RuleInputs(True, 0.02, 0.2, ("coverage",)))
    assert broken.reason == "audit" and broken.groups == variance_groups(4.0, m, 4) > base.groups
    assert starved.reason == "starved" and starved.groups == base.groups + 1


@pytest.mark.parametrize("key,value", [("anchor_rule", "adaptve"), ("on_flat_world_model", "ignore")])
def test_a_bad_rule_or_response_is_a_config_error_naming_the_key_and_the_choices(key, value):
    with pytest.raises(ConfigError, match=rf"algorithm\.{key}='{value}'.*choose one of"):
        load_config(None, [f"algorithm.{key}={value}"])


def test_fixed_stays_the_default():
    assert AlgorithmConfig().anchor_rule == "fixed" and AlgorithmConfig().on_flat_world_model == "warn"


SMALL = ["algorithm.groups_per_step=10", "algorithm.group_size=4", "algorithm.anchor_frac=0.3",
         "algorithm.min_pairs=24", "algorithm.refit_every=24", "algorithm.eta_window=24"]


def _shell_run(tmp_path: Path, steps: int, *extra: str) -> tuple[LoopShell, list[int], list[int]]:
    cfg = load_config(None, [*SMALL, *extra])
    shell = LoopShell(cfg.algorithm, tmp_path)
    rng = np.random.default_rng(0)
    parts = simulated_parts(cfg.simulator, 0, rng)
    planned, executed = [], []
    for step in range(steps):
        parts.world_model.step = step
        planned.append(shell.plan()[1].groups)
        done, _ = shell.step(step, task_pool=parts.task_ids, policy=parts.agent, executed_env=parts.execution,
                             world_model_env=parts.world_model, learner=parts.learner, rng=rng)
        executed.append(int(done.anchor.sum()))
    return shell, planned, executed


def test_the_step_executes_the_rules_count_and_progress_shows_it(tmp_path):
    shell, planned, executed = _shell_run(tmp_path, 12, "algorithm.anchor_rule=adaptive")
    assert executed == planned
    assert planned[0] == 3  # warm-up: the fixed count
    assert len(set(planned)) > 1  # after warm-up the rule moved it
    p = shell.progress()
    assert p["anchor_frac"] == planned[-1] / 10 and p["anchor_reason"]
    snap = shell.calibrator.snapshot()
    assert snap["anchor/frac"] == planned[-1] / 10 and snap["anchor/reason"] >= 0


@pytest.mark.parametrize("variant, groups", [("grpo_real", 10), ("pure_wm", 0)])
def test_progress_shows_what_a_variant_without_anchor_groups_executes(tmp_path, variant, groups):
    shell, _, executed = _shell_run(tmp_path, 2, f"algorithm.variant={variant}")
    p = shell.progress()
    assert executed == [groups, groups] and p["anchor_frac"] == groups / 10
    assert p["anchor_reason"] == f"{'every' if groups else 'no'} group executed ({variant})"


def test_resume_restores_the_next_anchor_count_exactly(tmp_path):
    shell, _, _ = _shell_run(tmp_path, 9, "algorithm.anchor_rule=adaptive")
    shell.calibrator.save()
    resumed = LoopShell(shell.alg, tmp_path, resume=True)
    assert resumed.calibrator.rule_inputs() == shell.calibrator.rule_inputs()
    assert resumed.plan()[1] == shell.plan()[1]
    assert resumed.progress()["anchor_reason"] == shell.progress()["anchor_reason"]


# --------------------------------------------------------------------------- the flat_top audit check


def _pairs(phi, n_groups: int = 60, n: int = 8, noise: float = 0.03, seed: int = 0):
    rng = np.random.default_rng(seed)
    pred, true, groups = [], [], []
    for g in range(n_groups):
        r = np.where(rng.random(n) < 0.2, 0.0, rng.beta(2, 4, n))
        pred += np.clip(phi(r) + rng.normal(0, noise, n), 0, 1).tolist()
        true += r.tolist()
        groups += [f"g{g}"] * n
    return np.array(pred), np.array(true), groups


def test_flat_top_flags_a_world_model_that_saturates_at_the_top_and_not_one_that_ranks():
    t = AuditThresholds(min_pairs=100, min_groups=10)
    # flat from r = 0.35 on: over the top quartile of the r > 0 of Beta(2, 4) scores (r >~ 0.45)
    flat = audit_pool(*_pairs(lambda r: np.minimum(0.9, 0.375 + 1.5 * r))[:2], groups=_pairs(lambda r: r)[2],
                      thresholds=t)
    ranks = audit_pool(*_pairs(lambda r: r**0.3)[:2], groups=_pairs(lambda r: r)[2], thresholds=t)
    assert "flat_top" in flat.flags and flat.top_rank_upper < t.min_top_rank
    assert "flat_top" not in ranks.flags and ranks.top_rank > 0.5


def _observe_flat(cal: Calibrator, steps: int) -> None:
    rng = np.random.default_rng(1)
    for step in range(steps):
        r = np.where(rng.random(8) < 0.2, 0.0, rng.beta(2, 4, 8))
        r_hat = np.clip(np.minimum(0.9, 0.375 + 1.5 * r) + rng.normal(0, 0.03, 8), 0, 1)
        cal.observe([AnchorPair(f"{step}/{i}", step, f"t{step % 5}", f"g{step}", str(i), float(r_hat[i]),
                                float(r[i])) for i in range(8)], step)
        if cal.audit_due:
            cal.audit(AuditThresholds(min_pairs=100, min_groups=10))


@pytest.mark.parametrize("response,variant,rho", [("warn", "wmrl", None), ("shift", "wmrl", 4.0),
                                                   ("anchors_only", "grpo_anchor_only", None)])
def test_once_flat_top_warns_the_chosen_response_plans_the_step(tmp_path, response, variant, rho):
    alg = AlgorithmConfig(min_pairs=100, refit_every=24, on_flat_world_model=response, groups_per_step=10,
                          anchor_frac=0.2)
    shell = LoopShell(alg, None)
    _observe_flat(shell.calibrator, 100)
    assert shell.calibrator.warned("flat_top")
    planned_variant, decision, planned_rho = shell.plan()
    assert (planned_variant.name, planned_rho) == (variant, rho)
    if response == "anchors_only":
        assert decision.groups == 2 and decision.reason == "anchors_only"


def _observe_bump(cal: Calibrator, steps: int) -> None:
    """A world model that over-rates a band of mediocre solutions (the simulator's nonmonotone phi): it
    orders solutions around r = 0.35 backwards, while its top quartile still ranks."""
    rng = np.random.default_rng(1)
    for step in range(steps):
        r = rng.beta(2, 2, 8)
        r_hat = np.clip(r + 0.5 * np.exp(-(((r - 0.35) / 0.08) ** 2)) + rng.normal(0, 0.03, 8), 0, 1)
        cal.observe([AnchorPair(f"{step}/{i}", step, f"t{step % 5}", f"g{step}", str(i), float(r_hat[i]),
                                float(r[i])) for i in range(8)], step)
        if cal.audit_due:
            cal.audit(AuditThresholds(min_pairs=100, min_groups=10))


def test_a_world_model_that_orders_a_band_backwards_is_routed_around_like_a_flat_one():
    """Theorem 4 needs Delta_phi > 0 everywhere: a monotonicity warning (Delta_phi < 0 somewhere) gets the
    chosen response too, not the variance bound's extra anchors beside a biased stream."""
    alg = AlgorithmConfig(min_pairs=100, refit_every=24, on_flat_world_model="anchors_only", groups_per_step=10,
                          anchor_frac=0.2, anchor_rule="adaptive")
    shell = LoopShell(alg, None)
    _observe_bump(shell.calibrator, 100)
    assert shell.calibrator.warned("monotonicity") and not shell.calibrator.warned("flat_top")
    variant, decision, _ = shell.plan()
    assert variant.name == "grpo_anchor_only" and decision.groups == 2 and decision.reason == "anchors_only"
    assert "monotonicity" in decision.detail
    warn_only = LoopShell(replace(alg, on_flat_world_model="warn"), None)
    _observe_bump(warn_only.calibrator, 100)
    variant, decision, _ = warn_only.plan()  # the rule alone: rho at w_max, more anchors, the stream kept
    assert variant.name == "wmrl" and decision.reason == "audit" and decision.groups > 2


def test_wmrl_status_shows_the_anchor_fraction_and_why(tmp_path):
    from launch_support import dry_config, make_run

    from wmrl.cli.status import PROGRESS, collect, render
    from wmrl.io import atomic_write_json

    run = make_run(dry_config(tmp_path, "anchors", 1))
    assert not [line for line in render(collect(run)).splitlines() if line.startswith("anchors")]
    atomic_write_json(run.path / PROGRESS, {"step": 3, "anchor_frac": 0.25,
                                            "anchor_reason": "2 of 8 groups (eta2/eta2_cal = 1.40: rho 2.40)"})
    (line,) = [line for line in render(collect(run)).splitlines() if line.startswith("anchors")]
    assert line == "anchors    25% of the groups: 2 of 8 groups (eta2/eta2_cal = 1.40: rho 2.40)"


@pytest.mark.timeout(180)
def test_the_anchored_trainer_takes_its_anchor_count_from_the_rule_and_logs_it(tmp_path):
    """The coordinator's anchored run (real workers, real executions): each step's anchor groups are the
    rule's, logged as anchor/frac and anchor/reason, and progress.json says why."""
    from launch_support import dry_config, make_run

    from wmrl.anchor_rule import REASONS
    from wmrl.orchestration.coordinator import Coordinator, iter_metrics

    run = make_run(dry_config(tmp_path, "adaptive", 6, "algorithm.anchor_rule=adaptive"))
    assert Coordinator(str(run.path))()["state"] == "finished"
    metrics = list(iter_metrics(run))
    assert [m["anchor/frac"] * 4 for m in metrics] == [m["anchor_groups"] for m in metrics]
    reasons = [REASONS[int(m["anchor/reason"])] for m in metrics]
    assert reasons[0] == "warm-up" and set(reasons[2:]) <= {"variance", "audit", "starved"}
    from wmrl.io import read_json

    assert read_json(run.path / "progress.json")["anchor_reason"].endswith(")")
