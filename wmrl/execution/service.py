"""The execution service the trainer uses: submit requests, wait for outcomes, cancel, stats.

The trainer only sees :class:`ExecutionService`. :class:`SpoolExecutionService` is its coordinator
side over the run directory's spool; who runs the workers does not matter to it:

- :class:`LocalExecutor` starts N ``wmrl worker`` processes on this machine (the embedded default);
- the Slurm launcher starts an array job whose tasks run ``wmrl worker RUN_DIR``.

Typical step::

    service = SpoolExecutionService(run, cfg.launch)
    service.submit(requests)                          # idempotent: same ids are not queued twice
    done = service.wait([r.request_id for r in requests], timeout_s=1500)
    service.cancel([r.request_id for r in requests if r.request_id not in done])
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol, Self

from wmrl.execution.config import LaunchConfig
from wmrl.execution.gpu_share import mps_daemon, slot_env, visible_gpus
from wmrl.execution.work import DEFAULT_WORK
from wmrl.io import read_json
from wmrl.storage.records import ExecutionOutcomeRecord, ExecutionRequest, InvalidResult
from wmrl.storage.rundir import RunDir
from wmrl.storage.spool import SWEEP_EVERY_S, LeaseWatch, Spool, visible_names

log = logging.getLogger(__name__)
THROUGHPUT_WINDOW_S = 600.0


@dataclass(frozen=True)
class ServiceStats:
    queued: int
    claimed: int
    done: int  # result files present (done or failed)
    quarantined: int
    live_workers: int  # heartbeat files of running workers renewed within one lease
    throughput_per_min: float  # results finished over the last THROUGHPUT_WINDOW_S

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class ExecutionService(Protocol):
    def submit(self, requests: Sequence[ExecutionRequest]) -> None:
        """Queue requests; ids already queued, claimed or done are not queued again."""
        ...

    def wait(self, request_ids: Iterable[str], timeout_s: float) -> dict[str, ExecutionOutcomeRecord]:
        """Outcomes of the given ids that are done by the deadline (maybe fewer than asked)."""
        ...

    def cancel(self, request_ids: Iterable[str]) -> None:
        """Drop queued ids; a worker already running one discards its result."""
        ...

    def stats(self) -> ServiceStats:
        ...


class SpoolExecutionService:
    """:class:`ExecutionService` over ``RUN_DIR/anchors``; the coordinator's side of the spool.

    ``wait`` sleeps between directory scans with backoff from ``poll_min_s`` to ``poll_max_s``
    (reset when something arrives), so an idle coordinator costs next to no CPU. While waiting it
    also returns expired claims of dead workers to the queue and quarantines corrupt results,
    re-queueing their request (``failed`` after ``max_attempts``).
    """

    def __init__(self, run: RunDir, launch: LaunchConfig, name: str = "coordinator") -> None:
        self.run_dir = run
        self.launch = launch
        self.name = name
        self.spool = Spool(run, launch.max_attempts, launch.timing.tmp_max_age_s)
        self.watch = LeaseWatch(launch.timing.lease_s)
        self._requests: dict[str, ExecutionRequest] = {}
        self._done: dict[str, ExecutionOutcomeRecord] = {}
        self._quarantined: Counter[str] = Counter()
        self._last_sweep = time.monotonic()

    def submit(self, requests: Sequence[ExecutionRequest]) -> None:
        claimed = self.spool.claimed_ids()
        for request in requests:
            rid = request.request_id
            self._requests[rid] = request
            self.spool.uncancel(rid)
            if rid in self._done or rid in claimed or self.spool.result_exists(rid):
                continue  # finished or running already (e.g. resubmitted after a coordinator restart)
            self.spool.enqueue(request)

    def wait(self, request_ids: Iterable[str], timeout_s: float) -> dict[str, ExecutionOutcomeRecord]:
        wanted = list(dict.fromkeys(request_ids))
        deadline = time.monotonic() + max(0.0, timeout_s)
        poll = self.launch.timing.poll_min_s
        while True:
            arrived = self._collect([rid for rid in wanted if rid not in self._done])
            now = time.monotonic()
            if all(rid in self._done for rid in wanted) or now >= deadline:
                break
            self.spool.reclaim_expired(self.watch, by=self.name)
            if now - self._last_sweep > SWEEP_EVERY_S:
                self.spool.sweep_tmp()
                self._last_sweep = now
            poll = self.launch.timing.poll_min_s if arrived else min(poll * 2, self.launch.timing.poll_max_s)
            time.sleep(max(0.0, min(poll, deadline - time.monotonic())))
        return {rid: self._done[rid] for rid in wanted if rid in self._done}

    def _collect(self, pending: list[str]) -> int:
        if not pending:
            return 0
        present = set(self.spool.done_ids())
        arrived = 0
        for rid in pending:
            if rid not in present:
                continue
            try:
                record = self.spool.read_result(rid)
            except InvalidResult as err:
                self._retry_quarantined(rid, str(err))
                continue
            if record is not None:
                self._done[rid] = record
                arrived += 1
        return arrived

    def _retry_quarantined(self, rid: str, reason: str) -> None:
        self._quarantined[rid] += 1
        request = self._requests.get(rid)
        if request is None:
            log.error("quarantined result of %s, a request this coordinator did not submit", rid)
            return
        attempt = self._quarantined[rid]
        if attempt >= self.launch.max_attempts:
            now = time.time()
            self.spool.publish(ExecutionOutcomeRecord(
                rid, request.run_id, "failed", None, {}, self.name, attempt, now, now, 0.0,
                f"gave up after {attempt} corrupt results; last: {reason}"))
        else:
            self.spool.enqueue(request, attempt, [f"corrupt result: {reason}"])

    def cancel(self, request_ids: Iterable[str]) -> None:
        for rid in request_ids:
            self.spool.cancel(rid)
            self._requests.pop(rid, None)

    def stats(self) -> ServiceStats:
        counts = self.spool.counts()
        return ServiceStats(counts["queued"], counts["claimed"], counts["done"], counts["quarantined"],
                            live_workers(self.run_dir, self.launch.timing.lease_s), throughput_per_min(self.spool))


def live_workers(run: RunDir, lease_s: float) -> int:
    """Workers whose heartbeat says running and was renewed within one lease (wall clock: display only)."""
    now, alive = time.time(), 0
    for name in visible_names(run.workers):
        try:
            if now - os.stat(run.workers / name).st_mtime < lease_s and read_json(run.workers / name)["state"] == "running":
                alive += 1
        except (OSError, ValueError, KeyError):
            continue
    return alive


def throughput_per_min(spool: Spool, newest: int = 500) -> float:
    """Executions per minute over the results of the last window (newest result files; names sort
    by step), measured between the first and the last of them so that a short run or one that has
    ended is not diluted by the idle rest of the window."""
    now, finished = time.time(), []
    for rid in spool.done_ids()[-newest:]:
        try:
            mtime = os.stat(spool.run.results / f"{rid}.json").st_mtime
        except FileNotFoundError:
            continue
        if now - mtime < THROUGHPUT_WINDOW_S:
            finished.append(mtime)
    span = max(finished) - min(finished) if len(finished) >= 2 else 0.0
    if span > 0:
        return (len(finished) - 1) / span * 60.0
    return len(finished) / (THROUGHPUT_WINDOW_S / 60.0)


class LocalExecutor:
    """N ``wmrl worker`` processes on this machine, on the run's spool: the same workers as on Slurm.

    ``work`` names the work factory (``module:attr``, see :mod:`wmrl.execution.work`). With
    ``executions_per_gpu`` > 1 and visible GPUs, worker ``i`` is a slot on GPU ``i // executions_per_gpu``
    told its share (:mod:`wmrl.execution.gpu_share`).
    """

    def __init__(self, run: RunDir, workers: int, work: str = DEFAULT_WORK,
                 idle_timeout_s: float | None = None, env: dict[str, str] | None = None,
                 executions_per_gpu: int = 1, worker_id_prefix: str = "", mps: str = "off") -> None:
        self.run_dir = run
        self.n = workers
        self.work = work
        self.idle_timeout_s = idle_timeout_s
        self.env = dict(env or {})
        self.executions_per_gpu = executions_per_gpu
        self.worker_id_prefix = worker_id_prefix
        self.mps = mps  # launch.mps: "own" starts a daemon for the slots (gpu_share.mps_daemon)
        self.procs: list[subprocess.Popen[bytes]] = []
        self._daemon = contextlib.ExitStack()

    def command(self, i: int = 0) -> list[str]:
        cmd = [sys.executable, "-m", "wmrl.cli.main", "worker", str(self.run_dir.path), "--work", self.work]
        if self.idle_timeout_s is not None:
            cmd += ["--idle-timeout", str(self.idle_timeout_s)]
        if self.worker_id_prefix:  # slots of one Slurm array task: the task's id plus the slot
            cmd += ["--worker-id", f"{self.worker_id_prefix}-s{i}"]
        return cmd

    def start(self) -> None:
        sharing = self.executions_per_gpu > 1 and visible_gpus({**os.environ, **self.env})
        if sharing and self.mps == "own":
            directory = Path(tempfile.mkdtemp(prefix="wmrl-mps-"))  # node-local, ours: removed at stop
            self._daemon.callback(shutil.rmtree, directory, ignore_errors=True)
            self.env.update(self._daemon.enter_context(mps_daemon(directory)))
        self.procs = [self._spawn(i) for i in range(self.n)]

    def _spawn(self, i: int) -> subprocess.Popen[bytes]:
        env = {**os.environ, **self.env}
        if self.executions_per_gpu > 1:
            env.update(slot_env(i, visible_gpus(env), self.executions_per_gpu, mps=self.mps != "off"))
        name = f"{self.worker_id_prefix}-s{i}" if self.worker_id_prefix else str(i)
        with open(self.run_dir.logs / f"local-worker-{name}.stderr", "ab") as err:
            return subprocess.Popen(self.command(i), stdout=subprocess.DEVNULL, stderr=err, env=env,
                                    start_new_session=True)

    def revive(self) -> None:
        """Restart the workers that exited (their idle timeout) while the run goes on: a slow phase of
        the coordinator (MLflow start-up, generation) must not leave queued work without workers."""
        if self.run_dir.is_ended():
            return
        for i, proc in enumerate(self.procs):
            if proc.poll() is not None:
                self.procs[i] = self._spawn(i)

    def alive(self) -> int:
        return sum(p.poll() is None for p in self.procs)

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM (workers release their claims and exit), then SIGKILL what is left."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._daemon.close()  # the MPS daemon quits once its clients are gone

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
