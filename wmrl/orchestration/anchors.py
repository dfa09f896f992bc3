"""The coordinator's side of anchor execution: the handle a trainer submits anchors through
(``AnchorRunner``), the Slurm worker array kept alive while work waits (``WorkerSupervisor``), and the
production work function of a run's workers (``real_work``: the run's own sandbox and grader).

The workers, the spool and the execution service themselves are :mod:`wmrl.execution`; this module is
what needs the whole run's config to drive them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from wmrl.config import WMRLConfig, load_config
from wmrl.execution.service import SpoolExecutionService
from wmrl.execution.work import WorkFn, config_work
from wmrl.slurm.client import WORKERS, active_tasks, load_jobs, submit_workers
from wmrl.storage.health import record_event
from wmrl.storage.records import ExecutionOutcomeRecord, ExecutionRequest
from wmrl.storage.rundir import RunDir, RunEnded

log = logging.getLogger(__name__)


class CoordinatorStopping(RuntimeError):
    """The coordinator was told to stop (SIGTERM, submitit's SIGUSR2) while a wait on executions was open."""


class AnchorRunner:
    """The trainer's handle on anchor execution: submit, wait (in slices, supervising the workers
    and the run between them), cancel what did not finish by the deadline.

    ``stop()`` ends an open wait within one slice. It is what a stopping coordinator calls: the agent
    waits on executions in a worker thread (:meth:`wmrl.agent.policy.AgentPolicy.rollout` runs the two
    environments concurrently), which the ``SystemExit`` of a signal handler cannot interrupt, and
    leaving the executor's block joins that thread; without ``stop()`` the coordinator would outlive
    Slurm's KillWait by the whole execution deadline (hours on a cluster) and be SIGKILLed before it
    released its lock and stopped its workers. The requests stay queued (as after a SIGKILL): a resumed
    step finds the results the workers published meanwhile."""

    def __init__(self, run: RunDir, cfg: WMRLConfig, service: SpoolExecutionService,
                 tick: Callable[[], None] = lambda: None) -> None:
        self.run_dir, self.cfg, self.service, self.tick = run, cfg, service, tick
        # set by stop(); the world model's HTTP client watches it too (wmrl/world_model/backends.py)
        self.stop_event = threading.Event()

    def stop(self) -> None:
        """End any open wait (and refuse new ones): the coordinator is exiting."""
        self.stop_event.set()

    @property
    def stopping(self) -> bool:
        return self.stop_event.is_set()

    def execute(self, requests: list[ExecutionRequest], timeout_s: float) -> dict[str, ExecutionOutcomeRecord]:
        if self.stopping:
            raise CoordinatorStopping(f"{len(requests)} executions not submitted: the coordinator is stopping")
        ids = [r.request_id for r in requests]
        self.service.submit(requests)
        self.tick()  # workers for the new work (a local worker may have left on its idle timeout)
        deadline = time.monotonic() + timeout_s
        done: dict[str, ExecutionOutcomeRecord] = {}
        while len(done) < len(ids) and time.monotonic() < deadline:
            if self.run_dir.is_ended():
                raise RunEnded(self.run_dir.ended_reason() or "ended")
            if self.stopping:
                raise CoordinatorStopping(f"stopped waiting on {len(ids) - len(done)} of {len(ids)} executions: "
                                          "the coordinator is stopping (they stay queued for the resumed step)")
            slice_s = min(5.0, max(0.0, deadline - time.monotonic()))  # a cancel or a stop takes effect fast
            done.update(self.service.wait([i for i in ids if i not in done], slice_s))
            self.tick()
        missing = [i for i in ids if i not in done]
        if missing:
            log.warning("%d executions did not finish within %.0f s; cancelled", len(missing), timeout_s)
            self.service.cancel(missing)
        return done


class WorkerSupervisor:
    """Slurm mode: resubmit the worker array when work waits and no worker task is pending or running
    (workers end at their time limit or after ``idle_timeout_s``; the coordinator lives on)."""

    def __init__(self, run: RunDir, cfg: WMRLConfig, service: SpoolExecutionService,
                 every_s: float = 60.0) -> None:
        self.run_dir, self.cfg, self.service, self.every_s = run, cfg, service, every_s
        self._last = time.monotonic()

    def __call__(self) -> None:
        if time.monotonic() - self._last < self.every_s:
            return
        self._last = time.monotonic()
        if self.service.spool.counts()["queued"] == 0:
            return
        arrays = [r.job_id for r in load_jobs(self.run_dir) if r.kind == WORKERS]
        if active_tasks(arrays) == 0:
            job_id = submit_workers(self.cfg, self.run_dir)
            record_event(self.run_dir, "workers_resubmitted", array_job_id=job_id)


def real_work(run: RunDir) -> WorkFn:
    """Production (``launch.work``'s default): run the solution in the run's configured sandbox, grade it
    against the hidden answers (:func:`~wmrl.execution.work.config_work` of the run's config).

    Payload: ``ExecutionOutcome.to_dict()`` plus ``score`` (the position score). Infrastructure
    failures (sandbox cannot start, broken task) raise, so the worker retries the request.
    """
    return config_work(load_config(run.config_path), run.run_id)
