"""`wmrl sweep --rerun NAME --why TEXT`: a finished run is run again; the old one is kept, not deleted."""

from __future__ import annotations

import json

import pytest
from sweep_support import children, run_cli, sweep_argv, write_spec

from wmrl.config import ConfigError
from wmrl.storage.lock import RunLock
from wmrl.sweep.rerun import Rerun, supersede
from wmrl.sweep.spec import load_spec
from wmrl.sweep.state import SweepDir

pytestmark = pytest.mark.timeout(900)

SPEC = """\
name: small
kind: simulate
config: configs/simulate.yaml
overrides: [train.steps=30, simulator.log_every=10, tracking.experiment=sweep-test]
seeds: [0]
groups:
  - variants: [wmrl]
  - variants: [grpo_real]
"""
WHY = "node 12 starved its executions"


def _mtimes(runs):
    return {p.parent.name: p.stat().st_mtime_ns for p in runs.glob("*/result.json")}


def _finished_sweep(tmp_path):
    spec = write_spec(tmp_path, SPEC)
    done = run_cli(sweep_argv(spec, tmp_path, "--max-parallel", "1"))
    assert done.returncode == 0, done.stderr
    return spec, tmp_path / "sweeps" / "small"


def test_rerun_keeps_the_old_run_and_mlflow_and_compare_see_only_the_new_one(tmp_path):
    spec, root = _finished_sweep(tmp_path)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    state = json.loads((root / "sweep.json").read_text())
    old_id = (root / "runs" / "grpo_real_s0" / "mlflow_run_id").read_text().strip()
    old_result = (root / "runs" / "grpo_real_s0" / "result.json").read_bytes()
    before = _mtimes(root / "runs")

    done = run_cli(sweep_argv(spec, tmp_path, "--rerun", "grpo_real_s0", "--why", WHY))
    assert done.returncode == 0, done.stderr
    assert "1 run(s) finished now, 1 already finished" in done.stdout

    # the old run: moved whole, with a note saying why, its result byte for byte
    kept = list((root / "superseded").glob("grpo_real_s0-*"))
    assert len(kept) == 1
    assert (kept[0] / "result.json").read_bytes() == old_result
    note = json.loads((kept[0] / "SUPERSEDED.json").read_text())
    assert note["why"] == WHY and note["mlflow_run_id"] == old_id and note["name"] == "grpo_real_s0"
    # the new run: computed again (the simulator is deterministic: the same numbers), the other run untouched
    after = _mtimes(root / "runs")
    assert after["wmrl_s0"] == before["wmrl_s0"] and after["grpo_real_s0"] != before["grpo_real_s0"]
    new_id = (root / "runs" / "grpo_real_s0" / "mlflow_run_id").read_text().strip()
    assert new_id != old_id
    assert json.loads((root / "runs" / "grpo_real_s0" / "result.json").read_text())["final_score"] == \
        json.loads(old_result)["final_score"]

    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    old = client.get_run(old_id)
    assert old.info.lifecycle_stage == "deleted"  # restorable, not gone
    assert old.data.tags["wmrl.superseded_reason"] == WHY and old.data.tags["wmrl.superseded_dir"] == note["dir"]
    kids = children(uri, state["parent_run_id"])
    assert sorted(kids) == ["grpo_real_s0", "wmrl_s0"] and all(len(v) == 1 for v in kids.values())
    assert kids["grpo_real_s0"][0].info.run_id == new_id
    assert client.get_run(new_id).data.tags["wmrl.supersedes"] == old_id
    listed = json.loads((root / "sweep.json").read_text())["superseded"]
    assert [(e["name"], e["rerun_mlflow_run_id"]) for e in listed] == [("grpo_real_s0", new_id)]

    # the same command again (after a kill, say) supersedes nothing more and reruns nothing
    again = run_cli(sweep_argv(spec, tmp_path, "--rerun", "grpo_real_s0", "--why", WHY))
    assert again.returncode == 0, again.stderr
    assert "superseded for this reason already" in again.stdout and "2 already finished" in again.stdout
    assert _mtimes(root / "runs") == after and len(list((root / "superseded").iterdir())) == 1

    status = run_cli([*sweep_argv(spec, tmp_path)[:3], "status", str(root)])
    assert status.returncode == 0, status.stderr
    assert "runs       2 finished" in status.stdout
    assert "superseded grpo_real_s0 at " in status.stdout and f"({WHY}); kept in {note['dir']}" in status.stdout

    out = tmp_path / "cmp"
    cmp = run_cli([*sweep_argv(spec, tmp_path)[:3], "compare", str(root), "--out", str(out), "--no-log"])
    assert cmp.returncode == 0, cmp.stderr
    assert f"1 superseded run(s) left out: grpo_real_s0 ({WHY})" in cmp.stderr
    names = [json.loads(line)["name"] for line in (out / "records.jsonl").read_text().splitlines()]
    assert sorted(names) == ["grpo_real_s0", "wmrl_s0"]


def test_rerun_asks_why_and_names_what_it_cannot_rerun(tmp_path):
    spec, root = _finished_sweep(tmp_path)
    before = _mtimes(root / "runs")
    no_why = run_cli(sweep_argv(spec, tmp_path, "--rerun", "grpo_real_s0"))
    assert no_why.returncode == 2 and "--rerun needs --why" in no_why.stderr
    typo = run_cli(sweep_argv(spec, tmp_path, "--rerun", "grpo_rael_s0", "--why", WHY))
    assert typo.returncode == 2 and "no such run in sweep 'small'; did you mean grpo_real_s0" in typo.stderr
    assert _mtimes(root / "runs") == before and not (root / "superseded").exists()
    with pytest.raises(ConfigError, match="--why explains a --rerun"):
        Rerun.from_args(None, WHY)


def test_a_run_that_has_not_started_or_is_still_held_is_not_superseded(tmp_path):
    spec_path = write_spec(tmp_path, SPEC)
    spec = load_spec(spec_path)
    sweep = SweepDir(tmp_path / "sweep")
    with pytest.raises(ConfigError, match="the run has not started"):
        supersede(sweep, spec, Rerun(("wmrl_s0",), WHY), None)
    run = sweep.run_path("wmrl_s0")
    run.mkdir(parents=True)
    (run / "result.json").write_text("{}")
    lock = RunLock(run / "RUN_LOCK")  # a live coordinator: this process, heartbeating
    lock.acquire()
    try:
        with pytest.raises(ConfigError, match=r"still running \(its coordinator, pid \d+ on host"):
            supersede(sweep, spec, Rerun(("wmrl_s0",), WHY), None)
    finally:
        lock.release()
    assert (run / "result.json").exists() and not (sweep.root / "superseded").exists()
    entries = supersede(sweep, spec, Rerun(("wmrl_s0",), WHY), None)  # released: it goes, tracking off
    assert not run.exists() and (sweep.root / entries[0]["dir"] / "result.json").read_text() == "{}"


def test_a_tracking_store_that_cannot_be_reached_stops_the_rerun_with_nothing_moved(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    spec = load_spec(write_spec(tmp_path, SPEC))
    sweep = SweepDir(tmp_path / "sweep")
    run = sweep.run_path("wmrl_s0")
    run.mkdir(parents=True)
    (run / "mlflow_run_id").write_text("0123456789abcdef0123456789abcdef")
    with pytest.raises(ConfigError, match="could not retire its MLflow run .*nothing was moved"):
        supersede(sweep, spec, Rerun(("wmrl_s0",), WHY), "http://127.0.0.1:9")  # discard port: refused
    assert run.is_dir() and not (run / "SUPERSEDED.json").exists() and not (sweep.root / "superseded").exists()
