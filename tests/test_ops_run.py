"""Operating a run locally (issue 8): tracking that cannot kill training, a status that tells the truth,
resume that says what it did, cancel and relaunch. Real coordinators, workers, files and a real
`mlflow server` on loopback that is stopped in the middle of a run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from launch_support import (
    DRY,
    REPO,
    dry_config,
    events,
    make_run,
    progress_step,
    spawn_coordinator,
    wait_until,
)
from mlflow_server import MlflowServer, free_port

from wmrl.cli.status import collect
from wmrl.orchestration.coordinator import Coordinator
from wmrl.storage.metrics_log import read_rows
from wmrl.storage.rundir import RunDir

pytestmark = pytest.mark.timeout(600)


def wmrl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wmrl.cli.main", *args], capture_output=True, text=True,
                          timeout=300, check=False, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})


def metric_steps(uri: str, run_path, key: str = "executions") -> list[int]:
    from mlflow.tracking import MlflowClient

    run_id = (run_path / "mlflow_run_id").read_text().strip()
    return sorted(m.step for m in MlflowClient(uri).get_metric_history(run_id, key))


def mlflow_status(uri: str, run_path) -> str:
    from mlflow.tracking import MlflowClient

    return MlflowClient(uri).get_run((run_path / "mlflow_run_id").read_text().strip()).info.status


def test_tracking_server_stopped_mid_run_the_run_finishes_and_sync_completes_it(tmp_path):
    server = MlflowServer(tmp_path / "mlflow").start()
    try:
        run = make_run(dry_config(tmp_path, "outage", 8, f"tracking.uri={server.uri}", "tracking.retry_every_s=2"))
        proc = spawn_coordinator(run)
        wait_until("step 2", lambda: progress_step(run) >= 2, 180)
        server.stop()  # the outage
        assert proc.wait(timeout=300) == 0  # the run finishes regardless
        status = wmrl("status", str(run.path))
        assert "ended (finished)" in status.stdout and "NOT sent yet" in status.stdout
        assert f"wmrl sync {run.path}" in status.stdout and "failing since" in status.stdout
        server.start()
        synced = wmrl("sync", str(run.path))
        assert synced.returncode == 0, synced.stderr
        assert metric_steps(server.uri, run.path) == list(range(1, 9))  # every step, once
        assert mlflow_status(server.uri, run.path) == "FINISHED"
        (line,) = [t for t in wmrl("status", str(run.path)).stdout.splitlines() if t.startswith("tracking ")]
        assert line.endswith("record(s) sent") and "NOT" not in line
    finally:
        server.stop()


def test_tracking_server_down_at_start_costs_the_run_nothing(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("run_name: down\n")
    out = wmrl("launch", str(config), f"runs_root={tmp_path}", "train.steps=3", *DRY,
               f"tracking.uri=http://127.0.0.1:{free_port()}")
    assert out.returncode == 0, out.stderr
    assert "'state': 'finished'" in out.stdout
    info = collect(RunDir.open(tmp_path / "down"))
    assert info["tracking"]["pending"] == info["tracking"]["records"] > 0
    assert info["tracking"]["mlflow_run_id"] is None and "ConnectionError" in info["tracking"]["last_error"]


def test_killed_coordinator_shows_dead_its_workers_exit_and_a_relaunch_logs_each_step_once(tmp_path):
    run = make_run(dry_config(tmp_path, "killed", 6, "launch.timing.idle_timeout_s=600"))
    proc = spawn_coordinator(run)
    wait_until("step 2", lambda: progress_step(run) >= 2, 180)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    status = wmrl("status", str(run.path)).stdout
    assert "DEAD: coordinator not running" in status and "is no longer running" in status
    assert "ETA" not in status
    # Its local workers see the dead holder of the run lock and free their slots (not after 600 s).
    wait_until("orphaned workers to exit", lambda: collect(run)["live_workers"] == 0, 60)
    relaunch = wmrl("launch", str(run.path))
    assert relaunch.returncode == 0, relaunch.stderr
    rows = (run.path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(r)["step"] for r in rows] == [1, 2, 3, 4, 5, 6]  # replayed steps not appended again
    assert metric_steps(f"sqlite:///{tmp_path}/mlflow.db", run.path) == [1, 2, 3, 4, 5, 6]
    ended = wmrl("status", str(run.path)).stdout
    assert "ended (finished)" in ended and "ETA" not in ended and "checkpoint at step 6" in ended


def _corrupt_checkpoint(run) -> None:
    bad = run.path / "checkpoints" / "step-00000003"
    bad.mkdir(parents=True)
    (bad / "manifest.json").write_text('{"step": 3, "sha256": {"trainer.pkl": "00"}, "digest": "x"}')
    (bad / "trainer.pkl").write_bytes(b"garbage")


def test_restart_from_step_zero_when_no_checkpoint_verifies_is_loud(tmp_path):
    run = make_run(dry_config(tmp_path, "loud", 2, "launch.timing.idle_timeout_s=600"))
    _corrupt_checkpoint(run)
    out = subprocess.run([sys.executable, "-c", ("import sys; from wmrl.orchestration.coordinator import "
                          "Coordinator; Coordinator(sys.argv[1])()"), str(run.path)], capture_output=True,
                         text=True, timeout=300, check=False, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert "no checkpoint of" in out.stderr and "restarting from step 0" in out.stderr
    assert events(run, "no_checkpoint")
    assert "resume     WARNING: no checkpoint" in wmrl("status", str(run.path)).stdout


def test_restart_from_step_zero_can_be_made_an_error_and_status_shows_it(tmp_path):
    run = make_run(dry_config(tmp_path, "strict", 2, "launch.restart_without_checkpoint=false"))
    _corrupt_checkpoint(run)
    with pytest.raises(RuntimeError, match="refusing to restart from step 0"):
        Coordinator(str(run.path))()
    status = wmrl("status", str(run.path)).stdout
    assert "DEAD" in status and "not started" not in status
    assert "last error: RuntimeError: no checkpoint" in status


def test_status_counts_only_results_the_coordinator_accepts(tmp_path):
    run = make_run(dry_config(tmp_path, "junk", 2))
    (run.results / "junk.json").write_text("not json")
    (run.results / "s0-g0-t0-u0-x.json").write_text(json.dumps({"request_id": "other"}))
    info = collect(run)
    assert info["queue"]["done"] == 0 and info["queue"]["invalid"] == 2
    assert info["state"] == "not started"


def test_cancel_writes_plots_marks_mlflow_killed_and_resume_continues(tmp_path):
    run = make_run(dry_config(tmp_path, "cancel", 40))
    proc = spawn_coordinator(run)
    wait_until("step 1", lambda: progress_step(run) >= 1, 180)
    assert wmrl("cancel", str(run.path)).returncode == 0
    assert proc.wait(timeout=120) == 0
    assert (run.path / "plots" / "curves.png").is_file()
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    assert mlflow_status(uri, run.path) == "KILLED"
    refused = wmrl("launch", str(run.path))
    assert refused.returncode == 2 and "--resume" in refused.stderr
    stopped_at = max(read_rows(run.path / "metrics.jsonl"))
    resumed = subprocess.Popen([sys.executable, "-m", "wmrl.cli.main", "launch", str(run.path), "--resume"],
                               cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until("a step after the resume", lambda: progress_step(run) > stopped_at, 180)
    finally:
        run.mark_ended("test over")
        resumed.wait(timeout=120)
    assert events(run, "resumed")[-1]["checkpoint_step"] == stopped_at
