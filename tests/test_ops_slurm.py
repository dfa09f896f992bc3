"""Operating a run on the real local Slurm (issue 8): a FAILED coordinator is shown dead with its
error and its workers free their allocation; a relaunch adopts the live worker array; cancel writes
the plots and marks MLflow KILLED, as locally; a tracking server that is down costs nothing."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from launch_support import (
    REPO,
    dry_config,
    make_run,
    progress_step,
    require_slurm,
    squeue_gone,
    wait_until,
)
from mlflow_server import free_port

from wmrl.orchestration.launch import submit_run
from wmrl.slurm.client import WORKERS, cancel_jobs, load_jobs
from wmrl.storage.metrics_log import read_rows

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(600)]


@pytest.fixture(scope="module", autouse=True)
def cluster() -> None:
    require_slurm()


def wmrl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wmrl.cli.main", *args], capture_output=True, text=True,
                          timeout=300, check=False, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})


def _all_jobs_gone(run) -> bool:
    return all(squeue_gone(r.job_id) for r in load_jobs(run))


def test_failed_coordinator_is_shown_dead_with_its_error_and_its_workers_leave(tmp_path):
    cfg = dry_config(tmp_path, "failed", 3, "launch.executor=slurm", "launch.restart_without_checkpoint=false",
                     "launch.timing.idle_timeout_s=600")
    run = make_run(cfg)
    bad = run.path / "checkpoints" / "step-00000002"
    bad.mkdir(parents=True)
    (bad / "manifest.json").write_text("{}")  # checkpoints exist, none verifies: the coordinator refuses
    coordinator, _ = submit_run(cfg, run)
    try:
        wait_until("the coordinator job to fail", lambda: squeue_gone(coordinator), 180)
        status = wmrl("status", str(run.path)).stdout
        assert "DEAD: coordinator not running" in status and f"Slurm job {coordinator} FAILED" in status
        assert "last error: RuntimeError: no checkpoint" in status and "not started" not in status
        # The workers see the crash and free their allocation long before their 600 s idle timeout.
        wait_until("the worker array to end", lambda: _all_jobs_gone(run), 120)
    finally:
        cancel_jobs([r.job_id for r in load_jobs(run)])


def test_relaunch_adopts_the_live_worker_array_and_tracking_down_costs_nothing(tmp_path):
    cfg = dry_config(tmp_path, "adopt", 6, "launch.executor=slurm", "launch.timing.idle_timeout_s=600",
                     f"tracking.uri=http://127.0.0.1:{free_port()}")
    run = make_run(cfg)
    coordinator, workers = submit_run(cfg, run)
    try:
        wait_until("step 1", lambda: progress_step(run) >= 1, 180)
        cancel_jobs([coordinator])  # the coordinator alone goes (SIGTERM: saves, exits); workers live on
        wait_until("the coordinator job to leave", lambda: squeue_gone(coordinator), 120)
        assert not squeue_gone(workers)
        out = wmrl("launch", str(run.path))
        assert out.returncode == 0, out.stderr
        assert f"workers {workers} (adopted" in out.stdout
        wait_until("the run to finish", run.is_ended, 300, every_s=1)
    finally:
        cancel_jobs([r.job_id for r in load_jobs(run)])
    assert run.ended_reason() == "finished"
    assert [r.job_id for r in load_jobs(run) if r.kind == WORKERS] == [workers]  # no second array
    assert sorted(read_rows(run.path / "metrics.jsonl")) == [1, 2, 3, 4, 5, 6]
    assert "NOT sent yet" in wmrl("status", str(run.path)).stdout


def test_slurm_cancel_writes_plots_and_marks_mlflow_killed_like_a_local_cancel(tmp_path):
    from mlflow.tracking import MlflowClient

    cfg = dry_config(tmp_path, "cancel", 60, "launch.executor=slurm")
    run = make_run(cfg)
    submit_run(cfg, run)
    try:
        wait_until("step 1", lambda: progress_step(run) >= 1, 180)
        assert wmrl("cancel", str(run.path)).returncode == 0
        wait_until("the jobs to leave the queue", lambda: _all_jobs_gone(run), 120)
    finally:
        cancel_jobs([r.job_id for r in load_jobs(run)])
    assert (run.path / "plots" / "curves.png").is_file()
    run_id = (run.path / "mlflow_run_id").read_text().strip()
    assert MlflowClient(f"sqlite:///{tmp_path}/mlflow.db").get_run(run_id).info.status == "KILLED"
