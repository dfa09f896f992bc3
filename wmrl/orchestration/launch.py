"""Submitting a run to Slurm with submitit: the coordinator job, then the anchor worker array.

``wmrl launch`` calls :func:`submit_run`. The Slurm client utilities (executors, job records, the
worker array, job states) live in :mod:`wmrl.slurm.client`, below this module and the
coordinator.
"""

from __future__ import annotations

import logging
import os
import time

from wmrl.config import WMRLConfig
from wmrl.orchestration.coordinator import Coordinator
from wmrl.slurm.client import (
    COORDINATOR,
    WORKERS,
    JobRecord,
    check_slurm_available,
    clean_slurm_environment,
    live_jobs,
    record_job,
    slurm_executor,
    submit_workers,
)
from wmrl.storage.rundir import RunDir

log = logging.getLogger(__name__)


def submit_coordinator(cfg: WMRLConfig, run: RunDir) -> str:
    """The coordinator job; it trains what the run's config names (``trainer``)."""
    executor = slurm_executor(cfg, run, COORDINATOR)
    with clean_slurm_environment():
        job = executor.submit(Coordinator(str(run.path)))
    record_job(run, JobRecord(COORDINATOR, str(job.job_id), 1, time.time(), os.environ.get("SLURM_JOB_ID")))
    return str(job.job_id)


def submit_run(cfg: WMRLConfig, run: RunDir) -> tuple[str, str]:
    """Coordinator first (it owns the run), then the worker array; returns both job ids.

    A relaunch (the coordinator died, or was cancelled and is resumed) adopts a worker array of the
    run that still has tasks pending or running instead of submitting a second one beside it.
    """
    check_slurm_available()
    coordinator = submit_coordinator(cfg, run)
    live = live_jobs(run, WORKERS)
    if live:
        log.info("adopting worker array %s of %s (tasks still pending or running)", live[-1], run.path)
        return coordinator, live[-1]
    return coordinator, submit_workers(cfg, run)


