"""`wmrl sweep` on the local executor: runs under one MLflow parent, skip/resume on re-issue."""

from __future__ import annotations

import json
import signal
import time

import pytest
from sweep_support import REPO, SMALL_SPEC, children, popen_cli, run_cli, sweep_argv, write_spec

from wmrl.config import ConfigError
from wmrl.sweep.runner import prepare
from wmrl.sweep.spec import load_spec, run_configs

pytestmark = pytest.mark.timeout(1200)


def _sweep_json(root):
    return json.loads((root / "sweeps" / "small" / "sweep.json").read_text())


def test_spec_expands_grid_times_variants_times_seeds(tmp_path):
    spec = load_spec(write_spec(tmp_path))
    names = [r.name for r in spec.runs]
    assert len(names) == (4 + 1) * 2
    assert "wmrl_anchor_frac=0.4_w_max=1_s1" in names and "grpo_real_s0" in names


def test_runs_go_seed_by_seed_so_a_sweep_cut_short_holds_whole_pairs(tmp_path):
    spec = load_spec(write_spec(tmp_path))
    names = [r.name for r in spec.runs]
    # every setting of seed 0 (the spec's order within a seed) before any run of seed 1
    assert names[:5] == ["wmrl_anchor_frac=0.1_w_max=1_s0", "wmrl_anchor_frac=0.1_w_max=4_s0",
                         "wmrl_anchor_frac=0.4_w_max=1_s0", "wmrl_anchor_frac=0.4_w_max=4_s0", "grpo_real_s0"]
    assert {r.seed for r in spec.runs[5:]} == {1}


@pytest.mark.parametrize("path", sorted((REPO / "sweeps").glob("*.yaml")), ids=lambda p: p.name)
def test_committed_sweep_specs_expand_into_valid_run_configs(path, tmp_path):
    """The README and results name these specs: a typo in one must fail here, not minutes into a sweep."""
    spec = load_spec(path)
    configs = run_configs(spec, tmp_path)
    assert spec.name == path.stem and len(configs) == len(spec.runs) > 0
    for name, (cfg, _) in configs.items():
        assert cfg.run_name == name and cfg.algorithm.variant in name


def test_spec_with_unknown_key_names_file_and_key(tmp_path):
    spec = write_spec(tmp_path, "name: x\ngroups: [{variants: [wmrl]}]\nsedes: [1]\n")
    with pytest.raises(ConfigError, match=r"spec.yaml: unknown key\(s\) sedes"):
        load_spec(spec)


def test_spec_with_unknown_variant_names_allowed_ones(tmp_path):
    spec = write_spec(tmp_path, "name: x\ngroups: [{variants: [wmrl, grpo]}]\n")
    with pytest.raises(ConfigError, match=r"groups\[0\].variants.*grpo_real"):
        load_spec(spec)


def test_bad_grid_key_fails_before_anything_runs(tmp_path):
    spec = write_spec(tmp_path, "name: bad\nconfig: configs/simulate.yaml\ngroups:\n"
                                "  - variants: [wmrl]\n    grid: {algorithm.wmax: [1, 2]}\n")
    done = run_cli(sweep_argv(spec, tmp_path))
    assert done.returncode == 2
    assert "unknown config key 'algorithm.wmax'" in done.stderr
    assert not (tmp_path / "sweeps").exists()


def test_sweep_logs_every_run_as_child_of_one_parent(tmp_path):
    done = run_cli(sweep_argv(write_spec(tmp_path), tmp_path, "--max-parallel", "2"))
    assert done.returncode == 0, done.stderr
    parent = _sweep_json(tmp_path)["parent_run_id"]
    kids = children(f"sqlite:///{tmp_path}/mlflow.db", parent)
    assert len(kids) == 10 and all(len(v) == 1 for v in kids.values())
    run = kids["wmrl_anchor_frac=0.4_w_max=1_s1"][0]
    assert run.info.status == "FINISHED"
    assert run.data.params["algorithm.anchor_frac"] == "0.4" and run.data.params["algorithm.w_max"] == "1.0"
    assert "final/score" in run.data.metrics and "sim/score" in run.data.metrics


def test_killed_sweep_reissued_skips_finished_runs(tmp_path):
    spec = write_spec(tmp_path)
    argv = sweep_argv(spec, tmp_path, "--max-parallel", "1")
    proc = popen_cli(argv, tmp_path / "first.log")
    runs = tmp_path / "sweeps" / "small" / "runs"
    deadline = time.monotonic() + 200
    while len(list(runs.glob("*/mlflow.json"))) < 3:
        assert proc.poll() is None, (tmp_path / "first.log").read_text()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = {p.parent.name: p.stat().st_mtime_ns for p in runs.glob("*/result.json")}
    logged = {p.parent.name for p in runs.glob("*/mlflow.json")}
    assert 3 <= len(logged) < 10

    done = run_cli(argv)
    assert done.returncode == 0, done.stderr
    assert f"{len(logged)} already finished" in done.stdout
    after = {p.parent.name: p.stat().st_mtime_ns for p in runs.glob("*/result.json")}
    assert len(after) == 10
    assert all(after[name] == before[name] for name in before)  # computed once, never again
    kids = children(f"sqlite:///{tmp_path}/mlflow.db", _sweep_json(tmp_path)["parent_run_id"])
    assert sorted(kids) == sorted(after) and all(len(v) == 1 for v in kids.values())
    # Not a terminal: the progress is a plain line (the last one always), counting the earlier issue's runs.
    assert "sweep small: 10/10 runs" in done.stderr and "\r" not in done.stderr


def test_a_group_can_have_its_own_seeds(tmp_path):
    spec = load_spec(write_spec(tmp_path, SMALL_SPEC.replace("  - variants: [grpo_real]\n",
                                                             "  - variants: [grpo_real]\n    seeds: [5]\n")))
    names = [r.name for r in spec.runs]
    assert [n for n in names if n.startswith("grpo_real")] == ["grpo_real_s5"]
    assert sum(n.startswith("wmrl") for n in names) == 4 * 2  # the spec's seeds [0, 1]
    with pytest.raises(ConfigError, match=r"groups\[1\].seeds='5' must be a non-empty list of integers"):
        load_spec(write_spec(tmp_path, SMALL_SPEC.replace("  - variants: [grpo_real]\n",
                                                          "  - variants: [grpo_real]\n    seeds: '5'\n")))


def test_reissued_sweep_may_add_seeds_but_not_drop_or_change_runs(tmp_path):
    args = (tmp_path, "local", ("tracking.enabled=false",))
    spec_path = write_spec(tmp_path)
    prepare(load_spec(spec_path), *args)
    first = _sweep_json(tmp_path)
    # More seeds: the new runs are added to the same sweep, the old ones keep their configs.
    spec_path.write_text(SMALL_SPEC.replace("seeds: [0, 1]", "seeds: [0, 1, 2]"))
    prep = prepare(load_spec(spec_path), *args)
    state = _sweep_json(tmp_path)
    assert len(prep.configs) == 15 and len(state["runs"]) == 15 and state["runs"][:2] == first["runs"][:2]
    assert set(first["runs"]) < set(state["runs"]) and state["created_at"] == first["created_at"]
    assert (tmp_path / "sweeps" / "small" / "runs" / "grpo_real_s2" / "config.yaml").exists()
    # Dropping runs is refused, naming them; so is changing a kept run's config.
    spec_path.write_text(SMALL_SPEC)
    with pytest.raises(ConfigError, match="holds a different sweep named 'small'.*no longer lists 5 of its runs"):
        prepare(load_spec(spec_path), *args)
    spec_path.write_text(SMALL_SPEC.replace("seeds: [0, 1]", "seeds: [0, 1, 2]").replace("steps=30", "steps=40"))
    with pytest.raises(ConfigError, match=r"run wmrl_anchor_frac=0.1_w_max=1_s0 .*train.steps: 30 in the run, 40 now"):
        prepare(load_spec(spec_path), *args)
    assert _sweep_json(tmp_path) == state  # a refused issue records nothing


@pytest.mark.parametrize("kind", ["simulate", "launch"])
def test_a_sweep_written_before_an_upgrade_that_added_config_keys_continues(tmp_path, kind):
    """A sweep's stored configs lack the keys a later version added (here train.share_initial_eval, at its
    default): re-issued with the new version it continues; a changed value is still refused."""
    text = SMALL_SPEC if kind == "simulate" else SMALL_SPEC.replace("kind: simulate", "kind: launch")
    args = (tmp_path, "local", ("tracking.enabled=false",))
    spec_path = write_spec(tmp_path, text)
    prep = prepare(load_spec(spec_path), *args)
    name = next(iter(prep.configs))
    stored = (prep.sweep.run_path(name) / "config.yaml" if kind == "simulate"
              else prep.sweep.root / "configs" / f"{name}.yaml")
    assert "share_initial_eval: true" in stored.read_text()
    stored.write_text(stored.read_text().replace("  share_initial_eval: true\n", ""))  # as the old version wrote it
    prepare(load_spec(spec_path), *args)  # continues
    stored.write_text(stored.read_text().replace("steps: 30", "steps: 40"))
    with pytest.raises(ConfigError, match=r"train.steps: 40 in the run, 30 now"):
        prepare(load_spec(spec_path), *args)


def test_launch_sweep_runs_a_coordinator_that_logs_under_the_parent(tmp_path):
    """kind: launch — each run is `wmrl launch` of its resolved config (here the dry trainer: real
    worker processes, tiny scripts); a re-issue finds it finished."""
    from launch_support import DRY

    spec = write_spec(tmp_path, "name: small\nkind: launch\n"
                                f"overrides: [train.steps=2, tracking.experiment=launch-sweep, {', '.join(DRY)}]\n"
                                "seeds: [0]\ngroups:\n  - variants: [wmrl]\n    grid: {algorithm.w_max: [8]}\n")
    done = run_cli(sweep_argv(spec, tmp_path, "--max-parallel", "1"), timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    run = tmp_path / "sweeps" / "small" / "runs" / "wmrl_w_max=8_s0"
    assert json.loads((run / "ENDED").read_text())["reason"] == "finished"
    kids = children(f"sqlite:///{tmp_path}/mlflow.db", _sweep_json(tmp_path)["parent_run_id"])
    assert list(kids) == ["wmrl_w_max=8_s0"]
    assert kids["wmrl_w_max=8_s0"][0].data.params["algorithm.w_max"] == "8.0"
    again = run_cli(sweep_argv(spec, tmp_path, "--max-parallel", "1"))
    assert again.returncode == 0 and "0 run(s) finished now, 1 already finished" in again.stdout
    # `wmrl status SWEEP_DIR`: a line per run, as `wmrl status RUN_DIR` reads it
    status = run_cli([*sweep_argv(spec, tmp_path)[:3], "status", str(run.parent.parent)])
    assert status.returncode == 0, status.stderr
    [line] = [line for line in status.stdout.splitlines() if line.startswith("wmrl_w_max=8_s0")]
    assert " 2/2 " in line and line.endswith("ended (finished)") and "runs       1 finished" in status.stdout


def test_status_of_a_sweep_that_has_not_run_says_so_for_every_run(tmp_path):
    from wmrl.cli.status import collect_sweep, render_sweep

    spec = write_spec(tmp_path, "name: small\nkind: launch\nconfig: configs/e2e-local.yaml\nseeds: [0, 1]\n"
                                "groups:\n  - variants: [wmrl, grpo_real]\n")
    prep = prepare(load_spec(spec), tmp_path, "local", (f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",))
    info = collect_sweep(prep.sweep.root)
    assert [r["name"] for r in info["runs"]] == ["wmrl_s0", "grpo_real_s0", "wmrl_s1", "grpo_real_s1"]
    assert {r["state"] for r in info["runs"]} == {"not started"}
    assert render_sweep(info).splitlines()[-1] == "runs       4 not started"
