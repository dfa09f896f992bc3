"""The LLM trainer through the coordinator on the real local Slurm: `wmrl launch` (submitit coordinator
job + worker array) of the micro config, `scontrol requeue` of the coordinator mid-run, and the resumed
job continues exactly where an uninterrupted run (``micro_run``, same seed) went."""

from __future__ import annotations

import pytest
from launch_support import REPO, progress_step, require_slurm, squeue_gone, wait_until
from train_support import (
    coordinator_events,
    learner_weights,
    micro_overrides,
    same_weights,
    sampled_tokens,
    wmrl,
)

from wmrl.configs import TINY_CONFIG
from wmrl.orchestration.rundir import RunDir
from wmrl.orchestration.slurm import cancel_jobs, load_jobs

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.timeout(1800)]
REQUEUE_NOW = str(REPO / "slurm" / "requeue-now.sh")
SLURM = ["launch.executor=slurm", "launch.coordinator_time_min=15", "launch.worker_time_min=15",
         "launch.checkpoint_margin_s=60"]


def test_llm_coordinator_requeued_with_scontrol_resumes_with_identical_tokens_and_weights(
        micro_run, micro_model, tmp_path):
    import subprocess

    require_slurm()
    launched = wmrl("launch", str(TINY_CONFIG), *micro_overrides(tmp_path, micro_model, "requeued"), *SLURM)
    assert launched.returncode == 0, launched.stdout + launched.stderr
    run = RunDir(tmp_path / "requeued")
    jobs = {r.kind: r.job_id for r in load_jobs(run)}
    try:
        wait_until("step 1", lambda: progress_step(run) >= 1, 600, every_s=0.5)
        # scontrol requeue (SIGTERM to the coordinator, mid-step 2), then StartTime=now
        subprocess.run([REQUEUE_NOW, jobs["coordinator"]], check=True, timeout=90)
        wait_until("the run to finish", run.is_ended, 600, every_s=1)
    finally:
        run.mark_ended("test over")
        wait_until("the jobs to leave the queue", lambda: all(squeue_gone(j) for j in jobs.values()), 120)
        cancel_jobs(list(jobs.values()))
    assert run.ended_reason() == "finished"
    terminated, resumed = coordinator_events(run.path, "terminated")[-1], coordinator_events(run.path, "resumed")[-1]
    assert terminated["step"] == 1 and resumed["restart_count"] == "1"
    assert resumed["checkpoint_step"] == 1 and resumed["identical"] is True
    assert sampled_tokens(run.path, 1) == sampled_tokens(micro_run, 1)  # the step after the checkpoint
    assert same_weights(learner_weights(micro_run, 2), learner_weights(run.path, 2))
