"""wmrl on the real local Slurm: worker arrays, lost workers, coordinator preemption/requeue, the run
lock across jobs. Submissions go through the launcher (submitit), as `wmrl launch` does."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest
from launch_support import (
    REPO,
    dry_config,
    events,
    final_digest,
    make_run,
    progress_step,
    slurm_problem,
    squeue_gone,
    uninterrupted_digest,
    wait_until,
)

from wmrl.execution.service import SpoolExecutionService
from wmrl.orchestration.launch import submit_coordinator, submit_run
from wmrl.slurm.client import cancel_jobs, submit_workers
from wmrl.storage.lock import RunLock
from wmrl.storage.records import ExecutionRequest

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(300)]
REQUEUE_NOW = str(REPO / "slurm" / "requeue-now.sh")


@pytest.fixture(scope="module", autouse=True)
def cluster() -> None:
    problem = slurm_problem()
    if problem is not None:
        if os.environ.get("WMRL_REQUIRE_SLURM") == "1":
            pytest.fail(f"WMRL_REQUIRE_SLURM=1 but {problem}")
        pytest.skip(problem)


def _sleepy(run, n: int, sleep_s: float, step: int = 0) -> list[ExecutionRequest]:
    code = f"import time\ntime.sleep({sleep_s})\nprint(0.25)\n"
    return [ExecutionRequest.create(run.run_id, step, "dry", i // 10, i % 10, code, 60) for i in range(n)]


def _end(run, *job_ids: str) -> None:
    run.mark_ended("test over")
    try:
        wait_until("the jobs to leave the queue", lambda: all(squeue_gone(j) for j in job_ids), 60)
    finally:
        cancel_jobs(list(job_ids))


def test_worker_array_drains_requests_in_parallel_each_result_once(tmp_path):
    cfg = dry_config(tmp_path, "array", 1, "launch.workers=4")
    run = make_run(cfg)
    array = submit_workers(cfg, run)
    try:
        service = SpoolExecutionService(run, cfg.launch)
        requests = _sleepy(run, 60, 0.5)
        service.submit(requests)
        done = service.wait([r.request_id for r in requests], timeout_s=180)
    finally:
        _end(run, array)
    assert set(done) == {r.request_id for r in requests}
    assert sorted(p.stem for p in run.results.glob("*.json")) == sorted(done)  # one file per request
    assert len({r.worker_id for r in done.values()}) == 4
    assert all(r.worker_id.split("-")[1].startswith(f"{array}_") for r in done.values())
    intervals = sorted((r.started_at, r.finished_at) for r in done.values())
    overlap = max(sum(s <= t < f for s, f in intervals) for t, _ in intervals)
    # Ran side by side, not one after another: measured over the executions themselves, from the first
    # start to the last finish (the jobs' start-up, 4 interpreters importing at once on a loaded 2-core
    # machine, is Slurm's and the machine's time, not the array's): on average more than 2.5 at once.
    span = max(f for _, f in intervals) - min(s for s, _ in intervals)
    busy = sum(f - s for s, f in intervals)
    assert overlap >= 3 and busy / span > 2.5, (overlap, busy, span)


def _claimed_by_array_task(service) -> tuple[str, str, str]:
    """(request id, worker id, array task ``<array>_<index>``) of one current claim."""
    wait_until("a claim", lambda: bool(service.spool.claimed_ids()), 60, every_s=0.1)
    request_id, worker_id = min(service.spool.claimed_ids().items())
    return request_id, worker_id, worker_id.split("-")[1]  # <host>-<array>_<task>-<pid>


def test_scancel_of_an_array_task_mid_execution_hands_its_request_to_another_worker(tmp_path):
    cfg = dry_config(tmp_path, "cancelled-task", 1, "launch.workers=4")
    run = make_run(cfg)
    array = submit_workers(cfg, run)
    try:
        service = SpoolExecutionService(run, cfg.launch)
        requests = _sleepy(run, 12, 3.0)
        service.submit(requests)
        victim_request, victim_worker, task = _claimed_by_array_task(service)
        subprocess.run(["scancel", task], check=True, timeout=30)  # SIGTERM: the worker puts it back
        done = service.wait([r.request_id for r in requests], timeout_s=180)
    finally:
        _end(run, array)
    assert set(done) == {r.request_id for r in requests}
    assert done[victim_request].worker_id != victim_worker
    assert len(list(run.results.glob(f"{victim_request}*"))) == 1
    assert all(r.attempt == 0 for r in done.values())  # a preemption is not the request's fault


def test_frozen_array_task_loses_its_lease_and_its_request_runs_elsewhere_once(tmp_path):
    cfg = dry_config(tmp_path, "lost", 1, "launch.workers=4", "launch.timing.lease_s=5")
    run = make_run(cfg)
    array = submit_workers(cfg, run)
    try:
        service = SpoolExecutionService(run, cfg.launch)
        requests = _sleepy(run, 12, 3.0)
        service.submit(requests)
        victim_request, victim_worker, task = _claimed_by_array_task(service)
        # SIGSTOP (a hung node, a partitioned network): no handler runs and no heartbeat renews the
        # lease; only its expiry can bring the request back. (scancel --signal=KILL is a plain cancel.)
        subprocess.run(["scancel", "--signal=STOP", task], check=True, timeout=30)
        done = service.wait([r.request_id for r in requests], timeout_s=180)
        # Wake it up and cancel it: whatever it finishes or releases now must not count again.
        subprocess.run(["scancel", "--signal=CONT", task], check=True, timeout=30)
        subprocess.run(["scancel", task], check=True, timeout=30)
        wait_until("the frozen task to end", lambda: squeue_gone(task), 60)
    finally:
        _end(run, array)
    assert set(done) == {r.request_id for r in requests}
    again = done[victim_request]
    assert again.worker_id != victim_worker and again.attempt == 1  # re-run by another worker
    assert len(list(run.results.glob(f"{victim_request}*"))) == 1
    assert sum(r.attempt for r in done.values()) == 1  # nothing else ran twice
    assert not list(run.queue.glob("*.json")) and not service.spool.claimed_ids()


def _coordinator_run(tmp_path, name: str, steps: int):
    cfg = dry_config(tmp_path, name, steps, "launch.executor=slurm", "launch.timing.coordinator_time_min=10",
                     "launch.timing.worker_time_min=10", "launch.timing.checkpoint_margin_s=60")
    return cfg, make_run(cfg)


def test_coordinator_preempted_by_usr2_requeues_and_resumes_bit_identical(tmp_path):
    cfg, run = _coordinator_run(tmp_path, "preempted", 8)
    coordinator, workers = submit_run(cfg, run)
    try:
        wait_until("step 3", lambda: progress_step(run) >= 3, 120)
        # What Slurm does at the time limit (--signal=USR2@delay) or preemption with a grace signal:
        subprocess.run(["scancel", "--signal=USR2", coordinator], check=True, timeout=30)
        subprocess.run([REQUEUE_NOW, coordinator, "--no-requeue"], check=True, timeout=90)
        wait_until("the run to finish", run.is_ended, 180, every_s=1)
    finally:
        _end(run, coordinator, workers)
    requeued = events(run, "requeue")[-1]
    saved = [e for e in events(run, "checkpoint") if e["step"] == requeued["step"]][-1]
    resumed = events(run, "resumed")[-1]
    assert resumed["restart_count"] == "1" and resumed["slurm_job_id"] == coordinator
    assert resumed["step"] == requeued["step"] and resumed["digest"] == saved["digest"]
    assert run.ended_reason() == "finished"
    assert final_digest(run) == uninterrupted_digest(tmp_path, cfg)  # as if never stopped


def test_coordinator_requeued_with_scontrol_resumes_from_its_sigterm_checkpoint(tmp_path):
    cfg, run = _coordinator_run(tmp_path, "requeued", 6)
    coordinator, workers = submit_run(cfg, run)
    try:
        wait_until("step 2", lambda: progress_step(run) >= 2, 120)
        subprocess.run([REQUEUE_NOW, coordinator], check=True, timeout=90)  # scontrol requeue + StartTime=now
        wait_until("the run to finish", run.is_ended, 180, every_s=1)
    finally:
        _end(run, coordinator, workers)
    terminated = events(run, "terminated")[-1]
    resumed = events(run, "resumed")[-1]
    assert terminated["restart_count"] in (None, "0") and resumed["restart_count"] == "1"
    assert resumed["step"] == terminated["step"] and resumed["identical"] is True
    assert run.ended_reason() == "finished"


def test_second_coordinator_job_refuses_and_a_new_one_takes_over_after_kill_9(tmp_path):
    cfg, run = _coordinator_run(tmp_path, "contested", 200)
    first, workers = submit_run(cfg, run)
    second = third = ""
    try:
        wait_until("step 1", lambda: progress_step(run) >= 1, 120)
        second = submit_coordinator(cfg, run)
        wait_until("the second coordinator to give up", lambda: squeue_gone(second), 120)
        err = (run.logs / "submitit" / second / f"{second}_0_log.err").read_text()
        assert "RunLockHeld" in err and "in use by another coordinator" in err
        assert not squeue_gone(first)  # the first is untouched

        holder, _ = RunLock(run.lock_path).read_holder()
        assert holder.slurm_job_id == first
        os.kill(holder.pid, signal.SIGKILL)  # same node: the pid is ours to kill
        third = submit_coordinator(cfg, run)
        wait_until("the third coordinator to resume",
                   lambda: any(e["slurm_job_id"] == third for e in events(run, "resumed")), 120)
        resumed_at = events(run, "resumed")[-1]["step"]
        wait_until("a step by the third", lambda: progress_step(run) > resumed_at, 60)
    finally:
        _end(run, *(j for j in (first, second, third, workers) if j))
    assert events(run, "resumed")[-1]["identical"] is True
