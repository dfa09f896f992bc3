"""`wmrl simulate --from-run` and the anchor rule (issue 37 item 4): the run's per-step choices are read,
the rule's settings and the noise relative to warm-up are fitted, and the fitted simulator's choices are
compared with the run's.

Runs are real: `wmrl simulate` run directories (pair log + config) and a coordinator's anchored run
(real workers, metrics.jsonl written by the coordinator)."""

from __future__ import annotations

import json

import pytest

from wmrl.anchor_rule import REASONS
from wmrl.cli.main import main
from wmrl.sweep.from_run import fit_run, fitted_config, load_run
from wmrl.sweep.rule_trace import check_rule

KNOTS = [[0.0, 0.1], [0.5, 0.6], [1.0, 0.8]]
NOISE, DEGRADED, DEGRADE_STEP, STEPS = 0.03, 0.12, 40, 80


def _simulate_run(out, *extra: str):
    rc = main(["simulate", f"train.steps={STEPS}", "simulator.phi=knots", f"simulator.phi_knots={json.dumps(KNOTS)}",
               f"simulator.wm_noise={NOISE}", "algorithm.anchor_frac=0.25", "tracking.enabled=false", *extra,
               "--variants", "wmrl", "--seeds", "1", "--workers", "1", "--out", str(out)])
    assert rc == 0
    return out / "runs" / "wmrl-seed0"


@pytest.fixture(scope="module")
def fixed_run(tmp_path_factory):
    return _simulate_run(tmp_path_factory.mktemp("fixed"))


@pytest.fixture(scope="module")
def adaptive_run(tmp_path_factory):
    """The adaptive rule facing a world model whose noise quadruples at step 40: few anchors before, more after."""
    return _simulate_run(tmp_path_factory.mktemp("adaptive"), "algorithm.anchor_rule=adaptive",
                         f"simulator.degrade_step={DEGRADE_STEP}", f"simulator.degrade_noise={DEGRADED}")


def test_a_fixed_rule_run_round_trips(fixed_run):
    ev = load_run(fixed_run)
    fit = fit_run(ev)
    assert [(s.groups, s.reason) for s in fit.rule.steps] == [(2, "fixed")] * STEPS  # round(0.25 * 8)
    assert fit.rule_settings == {"anchor_rule": "fixed", "anchor_frac": 0.25, "min_anchor_groups": 1,
                                 "anchor_max_gap": 0, "on_flat_world_model": "warn", "world_model_from": "start",
                                 "w_max": 4.0}
    assert fit.noise_change_step is None  # one noise level: no change point
    assert "algorithm.anchor_rule=fixed" in fit.simulator_overrides()
    assert fit.to_dict()["rule_settings"]["anchor_frac"] == 0.25
    assert "anchor_rule fixed, anchor_frac 0.25, min_anchor_groups 1" in fit.describe()
    agreement = check_rule(fitted_config(ev, fit), fit.rule, range(1), workers=1)
    assert (agreement.same_groups, agreement.same_reason, agreement.steps) == (1.0, 1.0, STEPS)


def test_the_noise_relative_to_warm_up_is_fitted_as_a_change_point(adaptive_run):
    ev = load_run(adaptive_run)
    fit = fit_run(ev)
    assert fit.noise_change_step is not None and abs(fit.noise_change_step - DEGRADE_STEP) <= 3
    assert fit.noise_warmup_sd == pytest.approx(NOISE, rel=0.3)
    assert fit.noise_scale == pytest.approx(NOISE, rel=0.3) and fit.noise_after == pytest.approx(DEGRADED, rel=0.25)
    cfg = fitted_config(ev, fit)
    assert (cfg.simulator.degrade_step, cfg.algorithm.anchor_rule) == (fit.noise_change_step, "adaptive")
    # a simulated run that ends before the change leaves it out (the run's own config's degrade_step too)
    assert fitted_config(ev, fit, [f"train.steps={DEGRADE_STEP // 2}"]).simulator.degrade_step is None


def test_the_fitted_simulator_reproduces_an_adaptive_runs_choices(adaptive_run):
    """Tolerances: the same anchor count at >= 50% of (step, seed), within one group at >= 80%, the same
    reason at >= 70%, the mean count within 0.5 group; the run's own eta2/eta2_cal (median after warm-up)
    within a factor 1.5. Measured (2 seeds): see the report printed by `wmrl simulate --from-run`."""
    ev = load_run(adaptive_run)
    fit = fit_run(ev)
    k = [s.groups for s in fit.rule.steps]
    assert max(k[DEGRADE_STEP + 10:]) > max(k[15:DEGRADE_STEP])  # the run drew more anchors once the noise rose
    assert fit.rule.reason_counts()["warm-up"] > 0 and fit.rule.source.startswith("decisions and inputs: pair-log")
    agreement = check_rule(fitted_config(ev, fit), fit.rule, range(2), workers=1)
    assert agreement.same_groups >= 0.5 and agreement.within_one >= 0.8 and agreement.same_reason >= 0.7
    assert agreement.mean_groups_sim == pytest.approx(agreement.mean_groups_real, abs=0.5)
    assert 1 / 1.5 <= agreement.ratio_sim[0] / agreement.ratio_real[0] <= 1.5


@pytest.mark.timeout(240)
def test_an_adaptive_coordinator_runs_choices_are_read_from_its_metrics(tmp_path, capsys):
    """The anchored trainer under the coordinator (real workers): its metrics.jsonl holds each step's
    decision; the pair-log replay decides the same and restores the eta2 the run logged."""
    from launch_support import dry_config, make_run

    from wmrl.orchestration.coordinator import Coordinator, iter_metrics

    run = make_run(dry_config(tmp_path, "adaptive", 8, "algorithm.anchor_rule=adaptive"))
    assert Coordinator(str(run.path))()["state"] == "finished"
    rows = {m["step"]: m for m in iter_metrics(run)}
    trace = load_run(run.path).rule
    assert trace.source.startswith("decisions: metrics.jsonl")
    assert [(s.groups, s.reason) for s in trace.steps] == [
        (round(rows[s + 1]["anchor/frac"] * 4), REASONS[int(rows[s + 1]["anchor/reason"])]) for s in range(8)]
    assert trace.replay_agreement == 1.0
    for s in trace.steps[1:]:  # the state after step s - 1 (row s) is what step s's decision read
        logged = rows[s.step].get("eta2")
        assert s.eta2 == (pytest.approx(logged, rel=1e-12) if logged is not None else None)
    out = tmp_path / "plan"
    assert main(["simulate", "--from-run", str(run.path), "--min-pairs", "10", "--seeds", "1", "--workers", "1",
                 "--variants", "wmrl", "--anchor-fracs", "0.25", "--w-maxes", "4", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "the rule in the run (decisions: metrics.jsonl" in printed
    assert "## The anchor rule: simulated against the run (1 seed(s), its first 8 steps)" in printed
    meta = json.loads((out / "fit.json").read_text())["meta"]
    assert meta["anchor_rule_check"]["steps"] == 8 and (out / "plan.md").read_text().endswith(printed[-200:])
