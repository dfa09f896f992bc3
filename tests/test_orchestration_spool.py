"""The anchor spool on a real directory: claims, leases, first-wins results, quarantine, cancel."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wmrl.config import load_config, to_yaml
from wmrl.execution.config import LaunchConfig
from wmrl.execution.service import SpoolExecutionService
from wmrl.io import TMP_PREFIX
from wmrl.storage.records import (
    ExecutionOutcomeRecord,
    ExecutionRequest,
    InvalidResult,
    make_request_id,
)
from wmrl.storage.rundir import RunDir, create_run_dir
from wmrl.storage.spool import LeaseWatch, Spool


def make_run(tmp_path: Path, **launch: object) -> tuple[RunDir, LaunchConfig]:
    cfg = load_config(None, ["run_name=t", *(f"launch.{k}={v}" for k, v in launch.items())])
    return create_run_dir(tmp_path / "t", to_yaml(cfg)), cfg.launch


def request(i: int, code: str = "print(0.5)") -> ExecutionRequest:
    return ExecutionRequest.create("t", step=1, task_id="iris", group_id=0, traj_id=i, code=code, timeout_s=30)


def record(req: ExecutionRequest, score: float = 0.5, worker: str = "w1") -> ExecutionOutcomeRecord:
    now = time.time()
    return ExecutionOutcomeRecord(req.request_id, req.run_id, "done", score, {"score": score}, worker, 0,
                                  now, now, 0.0)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


# ---------------------------------------------------------------------------- records


def test_request_id_is_deterministic_and_distinct_per_trajectory() -> None:
    assert make_request_id("run", 3, 1, 2) == make_request_id("run", 3, 1, 2)
    assert len({make_request_id("run", 3, g, t) for g in range(4) for t in range(8)}) == 32
    assert make_request_id("run", 3, 1, 2) != make_request_id("other", 3, 1, 2)


def test_request_round_trips_through_dict() -> None:
    req = request(7)
    assert ExecutionRequest.from_dict(json.loads(json.dumps(req.to_dict()))) == req


def test_request_id_with_a_dot_is_rejected() -> None:
    with pytest.raises(ValueError, match="request_id"):
        ExecutionRequest("a.b", "t", 0, "iris", 0, 0, "", 1.0)


# ---------------------------------------------------------------------------- queue and claims


def test_enqueue_of_a_queued_id_adds_nothing(tmp_path: Path) -> None:
    run, _ = make_run(tmp_path)
    spool = Spool(run)
    assert spool.enqueue(request(0)) is True
    assert spool.enqueue(request(0)) is False
    assert spool.queued_ids() == [request(0).request_id]


def test_only_one_of_two_claimers_wins_a_request(tmp_path: Path) -> None:
    run, _ = make_run(tmp_path)
    spool = Spool(run)
    spool.enqueue(request(0))
    assert spool.claim_next("a") is not None
    assert spool.claim_next("b") is None


def test_competing_processes_claim_each_request_exactly_once(tmp_path: Path) -> None:
    run, _ = make_run(tmp_path)
    spool = Spool(run)
    for i in range(120):
        spool.enqueue(request(i))
    script = (
        "import sys; from wmrl.storage.rundir import RunDir; from wmrl.storage.spool import Spool\n"
        "s = Spool(RunDir(sys.argv[1])); got = []\n"
        "while (c := s.claim_next(sys.argv[2])) is not None: got.append(c.request.request_id)\n"
        "print('\\n'.join(got))\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", script, str(run.path), f"w{k}"], stdout=subprocess.PIPE,
                              text=True) for k in range(4)]
    claimed = [line for p in procs for line in p.communicate(timeout=60)[0].split()]
    assert sorted(claimed) == sorted(request(i).request_id for i in range(120))


def test_released_claim_returns_to_the_queue_with_the_same_attempt(tmp_path: Path) -> None:
    run, _ = make_run(tmp_path)
    spool = Spool(run)
    spool.enqueue(request(0), attempt=1)
    claim = spool.claim_next("a")
    assert claim is not None and spool.release(claim)
    again = spool.claim_next("b")
    assert again is not None and again.attempt == 1 and spool.claimed_ids() == {request(0).request_id: "b"}


# ---------------------------------------------------------------------------- leases


def test_unrenewed_claim_is_requeued_with_one_more_attempt_after_the_lease(tmp_path: Path) -> None:
    run, _ = make_run(tmp_path)
    spool, clock = Spool(run, max_attempts=3), FakeClock()
    watch = LeaseWatch(10.0, clock)
    spool.enqueue(request(0))
    spool.claim_next("dead")
    assert spool.reclaim_expired(watch, "obs") == []  # first sight starts the observation
    clock.now = 9.0
    assert spool.reclaim_expired(watch, "obs") == []
    clock.now = 10.5
    assert spool.reclaim_expired(watch, "obs") == [request(0).request_id]
    claim = spool.claim_next("b")
    assert claim is not None and claim.attempt == 1 and "lease of dead expired" in claim.errors[0]


def test_renewed_claim_is_not_reclaimed(tmp_path: Path) -> None:
    run, _ = make_run(tmp_path)
    spool, clock = Spool(run), FakeClock()
    watch = LeaseWatch(10.0, clock)
    spool.enqueue(request(0))
    claim = spool.claim_next("live")
    assert claim is not None
    for step in range(1, 5):
        spool.reclaim_expired(watch, "obs")
        clock.now = step * 8.0
        os.utime(claim.path, ns=(step * 10**9, step * 10**9))  # a renewal changes the mtime
    assert spool.reclaim_expired(watch, "obs") == []
    assert spool.claimed_ids() == {request(0).request_id: "live"}


def test_request_expiring_max_attempts_times_gets_a_failed_result(tmp_path: Path) -> None:
    run, _ = make_run(tmp_path)
    spool, clock = Spool(run, max_attempts=2), FakeClock()
    watch = LeaseWatch(1.0, clock)
    spool.enqueue(request(0))
    for _ in range(2):
        spool.claim_next("dead")
        spool.reclaim_expired(watch, "obs")
        clock.now += 2.0
        spool.reclaim_expired(watch, "obs")
    result = spool.read_result(request(0).request_id)
    assert result is not None and result.status == "failed" and result.score is None
    assert spool.queued_ids() == [] and spool.claimed_ids() == {}


# ---------------------------------------------------------------------------- results


def test_duplicate_publish_is_ignored_and_the_first_result_kept(tmp_path: Path) -> None:
    run, _ = make_run(tmp_path)
    spool = Spool(run)
    req = request(0)
    assert spool.publish(record(req, 0.25, "first")) is True
    assert spool.publish(record(req, 0.75, "second")) is False
    got = spool.read_result(req.request_id)
    assert got is not None and (got.score, got.worker_id) == (0.25, "first")


def test_leftover_temp_file_is_not_a_result(tmp_path: Path) -> None:
    run, launch = make_run(tmp_path)
    req = request(0)
    (run.results / f"{TMP_PREFIX}{req.request_id}.json.x1").write_text(json.dumps(record(req).to_dict()))
    service = SpoolExecutionService(run, launch)
    service.submit([req])
    assert service.wait([req.request_id], timeout_s=0.2) == {}
    assert Spool(run).done_ids() == []


def test_sweeper_removes_old_temp_files_and_keeps_fresh_ones(tmp_path: Path) -> None:
    run, _ = make_run(tmp_path)
    old, fresh = run.results / f"{TMP_PREFIX}a", run.queue / f"{TMP_PREFIX}b"
    old.write_text("x")
    fresh.write_text("y")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    assert Spool(run, tmp_max_age_s=3600).sweep_tmp() == 1
    assert not old.exists() and fresh.exists()


def test_writer_killed_mid_publish_leaves_no_partial_result(tmp_path: Path) -> None:
    run, _ = make_run(tmp_path)
    script = (
        "import sys, time; from wmrl.storage.rundir import RunDir\n"
        "from wmrl.storage.spool import Spool\n"
        "from wmrl.storage.records import ExecutionOutcomeRecord as R\n"
        "s = Spool(RunDir(sys.argv[1])); i = 0\n"
        "while True:\n"
        "    s.publish(R(f'r{i:06d}', 't', 'done', 0.5, {'pad': 'x' * 4_000_000}, 'w', 0, 0.0, 0.0, 0.0)); i += 1\n"
    )
    writer = subprocess.Popen([sys.executable, "-c", script, str(run.path)])
    deadline = time.monotonic() + 30
    while len(os.listdir(run.results)) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    spool = Spool(run)
    visible = spool.done_ids()
    assert visible, "the writer published nothing before it was killed"
    for rid in visible:
        result = spool.read_result(rid)  # raises InvalidResult on a torn file
        assert result is not None and result.score == 0.5
    assert os.listdir(run.quarantine) == []


CORRUPT = {
    "truncated": lambda good: good[: len(good) // 2],
    "not_json": lambda good: "this is not json",
    "empty": lambda good: "",
    "missing_fields": lambda good: json.dumps({"request_id": json.loads(good)["request_id"], "score": 0.5}),
    "id_mismatch": lambda good: good.replace('"request_id": "', '"request_id": "x'),
    "score_nan": lambda good: good.replace('"score": 0.5', '"score": NaN'),
    "score_above_one": lambda good: good.replace('"score": 0.5', '"score": 1.5'),
    "score_string": lambda good: good.replace('"score": 0.5', '"score": "0.5"'),
}


@pytest.mark.parametrize("kind", sorted(CORRUPT))
def test_corrupt_result_is_quarantined_with_a_reason_never_parsed(tmp_path: Path, kind: str) -> None:
    run, _ = make_run(tmp_path)
    spool = Spool(run, read_retries=2, read_backoff_s=0.001)
    req = request(0)
    good = json.dumps(record(req).to_dict(), indent=1, sort_keys=True)
    (run.results / f"{req.request_id}.json").write_text(CORRUPT[kind](good))
    with pytest.raises(InvalidResult):
        spool.read_result(req.request_id)
    assert spool.done_ids() == []
    reasons = [n for n in os.listdir(run.quarantine) if n.endswith(".reason")]
    assert len(reasons) == 1
    assert json.loads((run.quarantine / reasons[0]).read_text())["reason"]


def test_service_requeues_the_request_of_a_quarantined_result(tmp_path: Path) -> None:
    run, launch = make_run(tmp_path, max_attempts=3)
    service = SpoolExecutionService(run, launch)
    req = request(0)
    service.submit([req])
    claim = service.spool.claim_next("w")
    assert claim is not None
    (run.results / f"{req.request_id}.json").write_text('{"request_id": "')  # torn write
    service.spool.drop(claim)
    assert service.wait([req.request_id], timeout_s=0.3) == {}
    again = service.spool.claim_next("w2")
    assert again is not None and again.attempt == 1 and again.errors[0].startswith("corrupt result")


def test_service_records_failure_after_max_attempts_of_corrupt_results(tmp_path: Path) -> None:
    run, launch = make_run(tmp_path, max_attempts=2)
    service = SpoolExecutionService(run, launch)
    req = request(0)
    service.submit([req])
    for _ in range(2):
        claim = service.spool.claim_next("w")
        assert claim is not None
        service.spool.drop(claim)
        (run.results / f"{req.request_id}.json").write_text("garbage")
        service.wait([req.request_id], timeout_s=0.1)
    done = service.wait([req.request_id], timeout_s=1.0)
    assert done[req.request_id].status == "failed" and done[req.request_id].score is None


# ---------------------------------------------------------------------------- submit / wait / cancel


def test_submit_does_not_requeue_a_request_already_done(tmp_path: Path) -> None:
    run, launch = make_run(tmp_path)
    req = request(0)
    Spool(run).publish(record(req, 0.9))
    service = SpoolExecutionService(run, launch)
    service.submit([req])
    assert service.spool.queued_ids() == []
    assert service.wait([req.request_id], timeout_s=0)[req.request_id].score == 0.9


def test_cancel_removes_queued_work(tmp_path: Path) -> None:
    run, launch = make_run(tmp_path)
    service = SpoolExecutionService(run, launch)
    reqs = [request(i) for i in range(5)]
    service.submit(reqs)
    service.cancel([r.request_id for r in reqs[:3]])
    assert service.spool.queued_ids() == sorted(r.request_id for r in reqs[3:])


def test_wait_returns_only_what_is_done_by_the_deadline(tmp_path: Path) -> None:
    run, launch = make_run(tmp_path)
    service = SpoolExecutionService(run, launch)
    reqs = [request(i) for i in range(3)]
    service.submit(reqs)
    service.spool.publish(record(reqs[1], 0.3))
    start = time.monotonic()
    done = service.wait([r.request_id for r in reqs], timeout_s=0.5)
    assert 0.5 <= time.monotonic() - start < 10.0  # returns at its deadline (not the requests' 60 s timeouts)
    assert list(done) == [reqs[1].request_id]


def test_stats_count_queue_claims_and_results(tmp_path: Path) -> None:
    run, launch = make_run(tmp_path)
    service = SpoolExecutionService(run, launch)
    reqs = [request(i) for i in range(4)]
    service.submit(reqs)
    service.spool.claim_next("w")
    service.spool.publish(record(reqs[3]))
    stats = service.stats()
    assert (stats.queued, stats.claimed, stats.done, stats.live_workers) == (3, 1, 1, 0)


def test_throughput_is_measured_over_the_span_of_recent_results(tmp_path):
    from wmrl.execution.service import throughput_per_min

    run, _ = make_run(tmp_path)
    spool = Spool(run)
    finished_at = time.time() - 30.0
    for i in range(7):  # 7 results 5 s apart: 6 intervals in 30 s = 12 per minute
        path = run.results / f"s0-g0-t{i}-u0-abc.json"
        path.write_text("{}")
        os.utime(path, (finished_at + 5.0 * i - 30.0, finished_at + 5.0 * i - 30.0))
    assert throughput_per_min(spool) == pytest.approx(12.0)
