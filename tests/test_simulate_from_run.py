"""`wmrl simulate --from-run`: the simulator fitted to a run recovers what made the run, and plans a sweep.

The synthetic run is a real `wmrl simulate` run with a known world model (phi through knots, Gaussian
noise 0.05, +0.1 on half the tasks); the fit must find them in its anchor pairs."""

from __future__ import annotations

import csv
import json
import shutil

import numpy as np
import pytest

from wmrl.cli.main import main
from wmrl.sweep.from_run import fit_noise, fit_run, fitted_config, load_run
from wmrl.sweep.plan import grid

KNOTS = [[0.0, 0.1], [0.5, 0.6], [1.0, 0.8]]
NOISE, OFFSET = 0.05, 0.1


@pytest.fixture(scope="module")
def synthetic_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("sim")
    rc = main(["simulate", "train.steps=100", "simulator.phi=knots", f"simulator.phi_knots={json.dumps(KNOTS)}",
               f"simulator.wm_noise={NOISE}", f"simulator.wm_task_offset={OFFSET}", "algorithm.anchor_frac=0.25",
               "tracking.enabled=false", "--variants", "wmrl", "--seeds", "1", "--workers", "1", "--out", str(out)])
    assert rc == 0
    return out / "runs" / "wmrl-seed0"


@pytest.fixture(scope="module")
def fit(synthetic_run):
    return fit_run(load_run(synthetic_run))


def _phi(knots, r):
    table = np.asarray(knots)
    return np.interp(r, table[:, 0], table[:, 1])


def test_fit_recovers_the_world_models_map_per_task(fit, synthetic_run):
    true = load_run(synthetic_run).true
    r = np.linspace(0.0, np.quantile(true, 0.95), 50)  # where the run has pairs
    for task, offset in fit.task_offsets.items():
        biased = int(task) < 8  # wm_task_offset_frac 0.5 of 16 tasks
        expected = _phi(KNOTS, r) + (OFFSET if biased else 0.0)
        np.testing.assert_allclose(_phi(fit.phi_knots, r) + offset, expected, atol=0.04)


def test_fit_recovers_the_task_offsets_and_their_spread(fit):
    biased = np.mean([o for t, o in fit.task_offsets.items() if int(t) < 8])
    unbiased = np.mean([o for t, o in fit.task_offsets.items() if int(t) >= 8])
    assert biased - unbiased == pytest.approx(OFFSET, abs=0.02)
    assert fit.task_offset_sd == pytest.approx(OFFSET / 2, abs=0.015)  # +-0.05 around their mean


def test_fit_recovers_gaussian_noise(fit):
    assert fit.noise_family == "gaussian"
    assert fit.noise_scale == pytest.approx(NOISE, rel=0.1)


def test_the_fitted_simulator_reproduces_the_runs_world_model(fit, synthetic_run):
    cfg = fitted_config(load_run(synthetic_run), fit)
    sim = cfg.simulator
    assert sim.phi == "knots" and sim.wm_task_offset == pytest.approx(OFFSET, abs=0.03)
    r = np.linspace(0.0, 0.7, 30)
    # unbiased tasks see phi_knots, biased ones phi_knots + wm_task_offset: their mean is the run's mean map
    mean_map = _phi(sim.phi_knots, r) + sim.wm_task_offset / 2
    np.testing.assert_allclose(mean_map, _phi(KNOTS, r) + OFFSET / 2, atol=0.04)
    assert sim.tasks == 16 and cfg.train.steps == 100


def test_heavy_tailed_residuals_are_fitted_as_student_t():
    rng = np.random.default_rng(0)
    noise = fit_noise(0.05 * rng.standard_t(3.0, 3000), 2)
    assert noise["family"] == "student_t" and 2.0 < noise["df"] < 5.0
    assert noise["scale"] == pytest.approx(0.05, rel=0.2)


def test_gaussian_residuals_stay_gaussian():
    noise = fit_noise(np.random.default_rng(1).normal(0.0, 0.05, 3000), 2)
    assert noise["family"] == "gaussian" and noise["scale"] == pytest.approx(0.05, rel=0.05)


def test_measured_seconds_become_the_cost_per_unit(synthetic_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(synthetic_run, run)
    row = {"step": 4, "seconds_generation": 64.0, "seconds_world_model": 30.0, "seconds_execution": 80.0,
           "seconds_update": 8.0, "seconds_weight_sync": 2.0, "executions": 40, "wm_calls": 300}
    (run / "metrics.jsonl").write_text(json.dumps({"step": 3, "seconds_generation": 1.0}) + "\n" + json.dumps(row) + "\n")
    fit = fit_run(load_run(run))
    assert fit.cost_source == "measured"
    # 4 steps x 8 groups x 8 trajectories = 256 trajectories; weight sync is charged with the update
    assert fit.cost == pytest.approx({"exec_seconds": 2.0, "wm_call_seconds": 0.1, "gen_seconds": 0.25,
                                      "update_seconds": 2.5})


def test_too_few_anchor_pairs_is_an_error_saying_how_many(synthetic_run, tmp_path, capsys):
    n = len(load_run(synthetic_run).true)
    assert main(["simulate", "--from-run", str(synthetic_run), "--min-pairs", str(n + 1), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"has {n} anchor pair(s)" in err and f"at least {n + 1}" in err


def test_a_run_without_anchor_pairs_is_an_error_naming_what_was_looked_for(synthetic_run, tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(synthetic_run / "config.yaml", run / "config.yaml")
    assert main(["simulate", "--from-run", str(run), "--out", str(tmp_path / "plan")]) == 2
    assert "calibration/pairs.jsonl" in capsys.readouterr().err


def test_the_grid_gives_each_variant_the_axes_that_change_it(fit, synthetic_run):
    cfg = fitted_config(load_run(synthetic_run), fit)
    settings = grid(cfg, ["grpo_real", "pure_wm", "mixture", "wmrl"])
    count = {v: sum(s.variant == v for s in settings) for v in ("grpo_real", "pure_wm", "mixture", "wmrl")}
    assert count == {"grpo_real": 1, "pure_wm": 1, "mixture": 4, "wmrl": 16}


def test_plan_prints_fitted_parameters_and_a_compare_table(synthetic_run, tmp_path, capsys):
    out = tmp_path / "plan"
    assert main(["simulate", "--from-run", str(synthetic_run), "train.steps=10", "--variants", "grpo_real,wmrl",
                 "--anchor-fracs", "0.1,0.4", "--w-maxes", "1,8", "--seeds", "2", "--workers", "1",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "phi knots" in printed and "| wmrl | 0.4 | 8 | 2 |" in printed
    rows = list(csv.DictReader((out / "plan.csv").open()))
    assert {(r["variant"], r["anchor_frac"], r["w_max"]) for r in rows} == {
        ("grpo_real", "0.25", "4"), *(("wmrl", a, w) for a in ("0.1", "0.4") for w in ("1", "8"))}
    assert all(float(r["gpu_hours"]) > 0 for r in rows)
    assert main(["compare", str(out), "--out", str(tmp_path / "again")]) == 0  # records.jsonl reads back
    assert (tmp_path / "again" / "compare.csv").read_text() == (out / "plan.csv").read_text()


def test_from_run_plans_a_sweep_from_a_real_micro_train_run(micro_run, tmp_path, capsys):
    """The plan from the run dir of `wmrl train` (2 steps of a micro model, real workers and DeepSpeed)."""
    out = tmp_path / "plan"
    # 2 steps x 1 anchor group of 2: 4 pairs, below the default minimum of 30
    assert main(["simulate", "--from-run", str(micro_run), "--seeds", "1", "--out", str(out)]) == 2
    assert "has 4 anchor pair(s)" in capsys.readouterr().err
    assert main(["simulate", "--from-run", str(micro_run), "--min-pairs", "4", "--seeds", "1",
                 "--variants", "wmrl,grpo_real", "--anchor-fracs", "0.5", "--w-maxes", "2", "--out", str(out)]) == 0
    fit = json.loads((out / "fit.json").read_text())
    assert fit["n_pairs"] == 4 and fit["cost_source"].startswith("measured") and fit["steps"] == 2
    generation = fit["measured_seconds"]["generation"]
    assert generation > 0 and fit["cost"]["gen_seconds"] == pytest.approx(generation / (2 * 2 * 2))
    assert {r["variant"] for r in csv.DictReader((out / "plan.csv").open())} == {"wmrl", "grpo_real"}
