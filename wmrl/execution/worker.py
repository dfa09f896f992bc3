"""The anchor worker loop: claim -> execute -> publish -> repeat, with a heartbeat thread.

One worker is one process (a Slurm array task, or a local subprocess). It

- claims the oldest queued request by rename and renews the claim's lease every ``heartbeat_s``
  from a background thread while the work function runs;
- publishes the outcome first-wins (a duplicate from a re-run is ignored) and drops its claim;
- on a work-function error re-queues the request (``attempt + 1``; failed after ``max_attempts``);
- while idle, returns expired claims of dead workers to the queue and sweeps old temp files;
- exits when the run has ended (``ENDED``), after ``idle_timeout_s`` without work, or on
  SIGTERM / SIGUSR1 / SIGINT (Slurm preemption or time limit): then it aborts the running work,
  puts its claim back in the queue for another worker, and exits 0. Slurm signals every process of
  the step, so the execution may die of the same signal first: such an outcome is not published.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from types import FrameType
from typing import Any

from wmrl.execution.config import LaunchConfig
from wmrl.execution.gpu_share import gpu_fraction
from wmrl.execution.work import WorkFn
from wmrl.io import atomic_write_json
from wmrl.storage.health import coordinator_health
from wmrl.storage.records import ExecutionOutcomeRecord, check_id, check_score, sanitize_id
from wmrl.storage.rundir import RunDir, host_name, slurm_identity
from wmrl.storage.spool import SWEEP_EVERY_S, Claim, LeaseWatch, Spool

log = logging.getLogger(__name__)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)
# How long an execution that died of a stop signal waits for this worker's own: Slurm signals every
# process of a step, the solution's too, and the solution may die (and its result come back) first.
STOP_SIGNAL_GRACE_S = 2.0


class Preempted(BaseException):
    """Raised into the running work function by a stop signal (a BaseException, so that the work
    function's own ``except Exception`` cannot swallow it)."""


def died_of_stop_signal(payload: Any) -> bool:
    """Did the execution behind ``payload`` end by one of STOP_SIGNALS (a negative exit code, or 128 +
    the signal from a launcher such as bwrap)? ``python_work`` keeps the exit code at the top level,
    the sandbox's ``ExecutionOutcome`` in ``result``."""
    if not isinstance(payload, dict):
        return False
    result = payload.get("result")
    code = result.get("exit_code") if isinstance(result, dict) else payload.get("exit_code")
    return isinstance(code, int) and any(code in (-sig, 128 + sig) for sig in STOP_SIGNALS)


def default_worker_id() -> str:
    """``<host>-<array job>_<array task>-<pid>`` in a Slurm array, ``<host>-<pid>`` elsewhere."""
    host = sanitize_id(host_name().split(".")[0])
    env = os.environ
    if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
        return sanitize_id(f"{host}-{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}-{os.getpid()}")
    if env.get("SLURM_JOB_ID"):
        return sanitize_id(f"{host}-{env['SLURM_JOB_ID']}-{os.getpid()}")
    return f"{host}-{os.getpid()}"


def worker_log_handler(run: RunDir, worker_id: str) -> logging.Handler:
    handler = logging.FileHandler(run.logs / f"worker-{worker_id}.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    return handler


class Worker:
    def __init__(self, run: RunDir, work: WorkFn, launch: LaunchConfig, worker_id: str | None = None,
                 idle_timeout_s: float | None = None) -> None:
        self.run_dir = run
        self.work = work
        self.launch = launch
        self.worker_id = check_id("worker_id", worker_id or default_worker_id())
        self.idle_timeout_s = launch.timing.idle_timeout_s if idle_timeout_s is None else idle_timeout_s
        self.spool = Spool(run, launch.max_attempts, launch.timing.tmp_max_age_s)
        self.watch = LeaseWatch(launch.timing.lease_s)
        self.counts = {"done": 0, "errors": 0, "dropped": 0, "duplicates": 0, "released": 0}
        self.exit_reason = ""
        self._stop = threading.Event()
        self._in_work = False
        self._current: Claim | None = None
        self._started_at = time.time()
        self.gpu_fraction = gpu_fraction()

    # ------------------------------------------------------------------ the loop
    def run(self) -> int:
        previous = {sig: signal.signal(sig, self._on_signal) for sig in STOP_SIGNALS}
        beat = threading.Thread(target=self._heartbeat_loop, name="worker-heartbeat", daemon=True)
        self._write_heartbeat("running")
        beat.start()
        log.info("worker %s started on %s (pid %d) for run %s", self.worker_id, host_name(), os.getpid(),
                 self.run_dir.path)
        try:
            self._loop()
        except Preempted as stop:
            self._in_work = False
            claim, self._current = self._current, None
            if claim is not None and self.spool.release(claim):
                self.counts["released"] += 1
                log.warning("released %s back to the queue", claim.request.request_id)
            self.exit_reason = f"stopped by {stop}"
        finally:
            self._stop.set()
            beat.join()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self._write_heartbeat("exited")
            log.info("worker %s exits: %s; %s", self.worker_id, self.exit_reason, self.counts)
        return 0

    def _loop(self) -> None:
        poll = self.launch.timing.poll_min_s
        idle_since = time.monotonic()
        last_sweep = last_health = 0.0
        dead_since: float | None = None
        while not self._stop.is_set():
            if self.run_dir.is_ended():
                self.exit_reason = f"run ended ({self.run_dir.ended_reason()})"
                return
            claim = self.spool.claim_next(self.worker_id)
            if claim is not None:
                self._process(claim)
                poll = self.launch.timing.poll_min_s
                idle_since = time.monotonic()
                continue
            if time.monotonic() - idle_since >= self.idle_timeout_s:
                self.exit_reason = f"idle for {self.idle_timeout_s:.0f} s"
                return
            if time.monotonic() - last_health >= self.launch.timing.lock_heartbeat_s:
                last_health = time.monotonic()
                health = coordinator_health(self.run_dir, self.launch.timing.lock_stale_s)
                dead_since = (dead_since or time.monotonic()) if health.state == "dead" else None
                # The coordinator that was alive while this worker ran crashed or was killed: free
                # the allocation now, not after idle_timeout_s. A death older than this worker may
                # be an earlier incarnation that a relaunch is taking over: give it lock_stale_s.
                if dead_since is not None and ((health.last_seen or 0.0) >= self._started_at
                                               or time.monotonic() - dead_since >= self.launch.timing.lock_stale_s):
                    self.exit_reason = f"no live coordinator ({health.detail})"
                    return
            self.spool.reclaim_expired(self.watch, by=self.worker_id)
            if time.monotonic() - last_sweep > SWEEP_EVERY_S:
                self.spool.sweep_tmp()
                last_sweep = time.monotonic()
            self._stop.wait(poll)
            poll = min(poll * 2, self.launch.timing.poll_max_s)
        self.exit_reason = self.exit_reason or "stop requested"

    def _process(self, claim: Claim) -> None:
        rid = claim.request.request_id
        if self.spool.is_cancelled(rid) or self.spool.result_exists(rid):
            self.spool.drop(claim)  # nothing to do: cancelled, or finished by an earlier holder
            self.counts["dropped"] += 1
            return
        self._current = claim
        started, t0 = time.time(), time.monotonic()
        log.info("claimed %s (attempt %d)", rid, claim.attempt)
        try:
            self._in_work = True
            payload = self.work(claim.request)
            self._in_work = False
            if died_of_stop_signal(payload):
                log.info("%s ended by a stop signal: waiting up to %g s for this worker's own (a preemption)",
                         rid, STOP_SIGNAL_GRACE_S)
                if self._stop.wait(STOP_SIGNAL_GRACE_S):
                    # The preemption killed the execution before it reached this worker: not the solution's
                    # outcome. The claim goes back to the queue (run() releases it), as if stopped mid-work.
                    raise Preempted(
                        f"{self.exit_reason.removeprefix('stopped by ')}, which stopped the execution first")
            score = check_score(payload.get("score") if isinstance(payload, dict) else None)
            if self.gpu_fraction is not None:  # a slot sharing its GPU: counted at its share (gpu_share.py)
                payload = {**payload, "gpu_fraction": self.gpu_fraction}
            json.dumps(payload, allow_nan=False)  # publishable, or it counts as an error now
        except Exception as err:
            self._in_work = False
            self._current = None
            self.counts["errors"] += 1
            log.exception("work on %s failed", rid)
            self.spool.retry_or_fail(claim, f"{type(err).__name__} on {self.worker_id}: {err}", self.worker_id)
            return
        record = ExecutionOutcomeRecord(rid, claim.request.run_id, "done", score, payload, self.worker_id,
                                        claim.attempt, started, time.time(), time.monotonic() - t0)
        if self.spool.is_cancelled(rid):
            self.counts["dropped"] += 1
            log.info("dropped the result of cancelled %s", rid)
        elif self.spool.publish(record):
            self.counts["done"] += 1
        else:
            self.counts["duplicates"] += 1
        self.spool.drop(claim)
        self._current = None

    # ------------------------------------------------------------------ signals and heartbeat
    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        log.warning("received %s", name)
        self.exit_reason = f"stopped by {name}"
        self._stop.set()
        if self._in_work:
            self._in_work = False
            raise Preempted(name)

    def _heartbeat_loop(self) -> None:
        lost: str | None = None
        while not self._stop.wait(self.launch.timing.heartbeat_s):
            claim = self._current
            if claim is not None and not self.spool.renew(claim) and lost != claim.request.request_id:
                lost = claim.request.request_id
                log.warning("lease of %s was lost (reclaimed); its result still counts if first", lost)
            self._write_heartbeat("running")

    def _write_heartbeat(self, state: str) -> None:
        claim = self._current
        beat: dict[str, Any] = {
            "worker_id": self.worker_id, "host": host_name(), "pid": os.getpid(), "state": state,
            "slurm": slurm_identity(), "started_at": self._started_at, "beat_at": time.time(),
            "current": claim.request.request_id if claim else None, "counts": dict(self.counts),
            "exit_reason": self.exit_reason or None,
        }
        try:
            atomic_write_json(self.run_dir.workers / f"{self.worker_id}.json", beat)
        except OSError as err:  # a full or flaky filesystem must not kill the work in progress
            log.warning("could not write heartbeat: %s", err)
