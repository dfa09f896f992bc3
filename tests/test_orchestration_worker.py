"""Real worker processes on a real spool: draining, kill -9, SIGTERM, end of run, cancel, errors."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from wmrl.config import load_config, to_yaml
from wmrl.execution.config import LaunchConfig
from wmrl.execution.service import LocalExecutor, SpoolExecutionService
from wmrl.execution.worker import Worker, default_worker_id
from wmrl.io import read_json
from wmrl.storage.records import ExecutionRequest, sanitize_id
from wmrl.storage.rundir import RunDir, create_run_dir
from wmrl.storage.spool import Spool

PYTHON_WORK = "wmrl.execution.work:python_work"
FAST = {"timing.lease_s": 1.5, "timing.heartbeat_s": 0.2, "timing.poll_min_s": 0.02, "timing.poll_max_s": 0.2}


def make_run(tmp_path: Path, **launch: object) -> tuple[RunDir, LaunchConfig]:
    settings = {**FAST, **launch}
    cfg = load_config(None, ["run_name=t", *(f"launch.{k}={v}" for k, v in settings.items())])
    return create_run_dir(tmp_path / "t", to_yaml(cfg)), cfg.launch


def request(i: int, code: str) -> ExecutionRequest:
    return ExecutionRequest.create("t", step=1, task_id="iris", group_id=i // 8, traj_id=i % 8, code=code,
                                   timeout_s=60)


def start_worker(run: RunDir, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "wmrl.cli.main", "worker", str(run.path), "--work",
                             PYTHON_WORK, *extra])


def wait_for(predicate: Callable[[], Any], timeout_s: float = 60.0, every_s: float = 0.05) -> Any:
    # Generous: a worker process starting on a loaded 2-core CI machine took most of the old 20 s.
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every_s)
    raise AssertionError(f"condition not met within {timeout_s} s")


def result_files(run: RunDir) -> list[str]:
    return sorted(n for n in os.listdir(run.results) if not n.startswith("."))


def test_local_workers_drain_sixty_requests_each_result_once(tmp_path: Path) -> None:
    run, launch = make_run(tmp_path)
    reqs = [request(i, f"print({i} / 100)") for i in range(60)]
    service = SpoolExecutionService(run, launch)
    service.submit(reqs)
    with LocalExecutor(run, workers=3, work=PYTHON_WORK, idle_timeout_s=30) as pool:
        done = service.wait([r.request_id for r in reqs], timeout_s=120)
        assert pool.alive() == 3
    assert len(done) == 60
    assert all(done[r.request_id].score == pytest.approx(i / 100) for i, r in enumerate(reqs))
    assert result_files(run) == sorted(f"{r.request_id}.json" for r in reqs)
    assert len({rec.worker_id for rec in done.values()}) > 1, "the work was not spread over workers"
    assert os.listdir(run.queue) == [] and os.listdir(run.claims) == []


def test_local_workers_that_left_on_their_idle_timeout_come_back_for_new_work(tmp_path: Path) -> None:
    run, launch = make_run(tmp_path)
    with LocalExecutor(run, workers=2, work=PYTHON_WORK, idle_timeout_s=0.5) as pool:
        wait_for(lambda: pool.alive() == 0, timeout_s=60)
        service = SpoolExecutionService(run, launch)
        service.submit([request(0, "print(0.25)")])
        pool.revive()
        done = service.wait([request(0, "").request_id], timeout_s=60)
    assert done[request(0, "").request_id].score == pytest.approx(0.25)


def held_until(go: Path, score: float) -> str:
    """A solution that runs until the test creates ``go`` (however slowly the test gets there), then scores."""
    return f"import os, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.02)\nprint({score})"


def test_worker_killed_mid_execution_loses_its_lease_and_the_request_runs_once_more(tmp_path: Path) -> None:
    run, launch = make_run(tmp_path)
    go = tmp_path / "go"
    req = request(0, held_until(go, 0.7))
    service = SpoolExecutionService(run, launch)
    service.submit([req])
    first = start_worker(run)
    try:
        claim = wait_for(lambda: [n for n in os.listdir(run.claims) if not n.startswith(".")])
        wait_for(lambda: children_of(first.pid))  # mid-execution
    finally:  # a failed wait must not leave the worker behind
        first.send_signal(signal.SIGKILL)
        first.wait()
    go.touch()  # the killed worker's orphaned solution finishes now; the rerun finishes at once
    second = start_worker(run, "--idle-timeout", "5")
    try:
        done = service.wait([req.request_id], timeout_s=30)
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=30)
    result = done[req.request_id]
    assert (result.score, result.attempt) == (0.7, 1)
    assert str(first.pid) in claim[0] and str(second.pid) in result.worker_id
    assert result_files(run) == [f"{req.request_id}.json"]
    time.sleep(1.0)  # the killed worker's orphaned solution finishing must not add anything
    assert result_files(run) == [f"{req.request_id}.json"]


def test_sigterm_releases_the_claim_back_to_the_queue(tmp_path: Path) -> None:
    run, _ = make_run(tmp_path)
    req = request(0, "import time; time.sleep(60); print(0.1)")
    Spool(run).enqueue(req)
    worker = start_worker(run)
    wait_for(lambda: [n for n in os.listdir(run.claims) if not n.startswith(".")])
    started = time.monotonic()
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0
    assert time.monotonic() - started < 30  # promptly: the solution would sleep 60 s
    assert os.listdir(run.claims) == [] and result_files(run) == []
    claim = Spool(run).claim_next("next")
    assert claim is not None and claim.attempt == 0  # preemption does not count as an attempt
    beat = read_json(next(run.workers.glob(f"*-{worker.pid}.json")))
    assert beat["state"] == "exited" and "SIGTERM" in beat["exit_reason"]


def children_of(pid: int) -> list[int]:
    return [int(c) for t in os.listdir(f"/proc/{pid}/task")
            for c in Path(f"/proc/{pid}/task/{t}/children").read_text().split()]


@pytest.mark.parametrize("signum", [signal.SIGUSR1, signal.SIGTERM])
def test_a_stop_signal_that_kills_the_solution_first_publishes_no_result(tmp_path: Path, signum: int) -> None:
    # Slurm signals every process of a step: the solution can die of the preemption a moment before its
    # worker hears of it (a `--signal=B:USR1@300` forwarded by the coordinator template killed a local
    # worker's program with exit -10, published as the solution's error, score 0: a resumed run then
    # trained on it and ended with another digest than an uninterrupted one).
    run, _ = make_run(tmp_path)
    Spool(run).enqueue(request(0, "import time; time.sleep(60); print(0.1)"))
    worker = start_worker(run)
    solution = wait_for(lambda: children_of(worker.pid))[0]
    time.sleep(0.3)  # the program is running
    os.kill(solution, signum)
    # ... and its death is seen before the worker's own signal arrives: the worker, its work done, waits up
    # to STOP_SIGNAL_GRACE_S (2 s) for that signal (and says so in its log)
    wait_for(lambda: "ended by a stop signal" in "".join(p.read_text() for p in run.logs.glob("worker-*.log")),
             timeout_s=60, every_s=0.01)
    worker.send_signal(signum)
    assert worker.wait(timeout=60) == 0
    assert result_files(run) == []
    claim = Spool(run).claim_next("next")
    assert claim is not None and claim.attempt == 0  # back in the queue, as a preempted request
    beat = read_json(next(run.workers.glob(f"*-{worker.pid}.json")))
    assert "stopped the execution first" in beat["exit_reason"]


def test_a_program_that_signals_itself_is_its_own_outcome(tmp_path: Path) -> None:
    run, _ = make_run(tmp_path)
    Spool(run).enqueue(request(0, "import os, signal; os.kill(os.getpid(), signal.SIGUSR1)"))
    worker = start_worker(run, "--idle-timeout", "5")
    assert worker.wait(timeout=60) == 0
    [name] = result_files(run)
    record = json.loads((run.results / name).read_text())
    assert record["status"] == "done" and record["score"] == 0.0 and record["outcome"]["exit_code"] == -signal.SIGUSR1


def test_worker_exits_when_the_run_ends(tmp_path: Path) -> None:
    run, _ = make_run(tmp_path)
    worker = start_worker(run)
    wait_for(lambda: list(run.workers.glob("*.json")))
    run.mark_ended("training finished")
    assert worker.wait(timeout=60) == 0
    beat = read_json(next(run.workers.glob("*.json")))
    assert "training finished" in beat["exit_reason"]


def test_worker_exits_after_the_idle_timeout(tmp_path: Path) -> None:
    run, _ = make_run(tmp_path)
    started = time.monotonic()
    worker = start_worker(run, "--idle-timeout", "1")
    assert worker.wait(timeout=60) == 0
    assert time.monotonic() - started >= 1.0
    assert "idle" in read_json(next(run.workers.glob("*.json")))["exit_reason"]


def test_cancelled_request_in_progress_publishes_no_result(tmp_path: Path) -> None:
    run, launch = make_run(tmp_path)
    go = tmp_path / "go"
    req = request(0, held_until(go, 0.4))
    service = SpoolExecutionService(run, launch)
    service.submit([req])
    worker = start_worker(run, "--idle-timeout", "30")
    try:
        wait_for(lambda: [n for n in os.listdir(run.claims) if not n.startswith(".")])
        service.cancel([req.request_id])
        go.touch()  # the solution could only finish after the cancel
        wait_for(lambda: not os.listdir(run.claims))
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
    assert result_files(run) == []


def test_work_function_errors_are_retried_then_recorded_as_failed(tmp_path: Path) -> None:
    run, launch = make_run(tmp_path, max_attempts=2)
    Spool(run).enqueue(request(0, ""))
    calls: list[str] = []

    def broken(req: ExecutionRequest) -> dict[str, Any]:
        calls.append(req.request_id)
        raise RuntimeError("grader crashed")

    assert Worker(run, broken, launch, "w-test", idle_timeout_s=0.5).run() == 0
    result = Spool(run).read_result(request(0, "").request_id)
    assert len(calls) == 2
    assert result is not None and result.status == "failed" and "grader crashed" in (result.error or "")


def test_work_returning_an_invalid_score_is_not_published_as_done(tmp_path: Path) -> None:
    run, launch = make_run(tmp_path, max_attempts=1)
    Spool(run).enqueue(request(0, ""))
    Worker(run, lambda req: {"score": float("nan")}, launch, "w-test", idle_timeout_s=0.3).run()
    result = Spool(run).read_result(request(0, "").request_id)
    assert result is not None and result.status == "failed" and "finite" in (result.error or "")


def test_worker_id_in_a_slurm_array_names_host_array_task_and_pid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "1234")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "7")
    host = sanitize_id(socket.gethostname().split(".")[0])
    assert default_worker_id() == f"{host}-1234_7-{os.getpid()}"


def test_worker_on_a_missing_run_directory_exits_2_with_a_message(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "wmrl.cli.main", "worker", str(tmp_path / "nope")],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2 and "not a wmrl run directory" in proc.stderr


def test_live_workers_are_counted_from_heartbeats(tmp_path: Path) -> None:
    run, launch = make_run(tmp_path)
    service = SpoolExecutionService(run, launch)
    with LocalExecutor(run, workers=2, work=PYTHON_WORK, idle_timeout_s=30):
        # Two fresh interpreters importing wmrl: 20 s was too short on a 2-core box at load ~10.
        wait_for(lambda: service.stats().live_workers == 2, timeout_s=90)
    assert service.stats().live_workers == 0
    assert all(json.loads(p.read_text())["state"] == "exited" for p in run.workers.glob("*.json"))
