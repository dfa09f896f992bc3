"""The evaluation before the first step, measured once per initial policy and read back by every later run
under the same runs root that starts from it (``train.share_initial_eval``).

Runs of a paired sweep (wmrl against grpo_real, one seed each) start from the same pinned policy and
evaluate it with the same seed: the same trajectories, the same executions, the same report, paid again
by every run. The report is stored under ``<runs_root>/.initial_evals/<key>.json`` (a sweep's runs share
their runs root; runs under another root measure their own), the key a hash of everything
the evaluation depends on (the policy's build hash, the split's task ids, k, the seed, sampling,
generation, the agent and the sandbox). A lock (the run lock's kind: created with ``link``, safe on
NFS, with a heartbeat) makes a second run that starts meanwhile wait for the first one's report instead
of measuring it again; the lock of a run that dies while evaluating goes stale, and the next run measures. Only complete measurements are stored: a report with a trajectory the
execution infrastructure gave up on is not (the next run measures again).

Skipping the evaluation changes nothing else in the run: it draws from its own RNG stream
(:func:`wmrl.evaluation.evaluate_split`), each generation from its own seeded generator, and executes
in its own request namespace.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wmrl.evaluation import EvalReport
from wmrl.io import atomic_write_json, read_json
from wmrl.storage.lock import RunLock, RunLockHeld

log = logging.getLogger(__name__)

# Bump when what an evaluation measures changes for the same inputs (prompts, parsing, grading).
SHARED_EVAL_VERSION = 1


SHARED_EVALS = ".initial_evals"  # under the runs root, beside the run directories


def eval_key(inputs: dict[str, Any]) -> str:
    """The stored report's name: a hash of every input of the evaluation (JSON-serialisable)."""
    body = json.dumps({"version": SHARED_EVAL_VERSION, **inputs}, sort_keys=True, default=str)
    return hashlib.sha256(body.encode()).hexdigest()[:20]


def shared_evaluation(inputs: dict[str, Any], run_id: str, evaluate: Callable[[], EvalReport], directory: Path,
                      stale_s: float = 120.0, heartbeat_s: float = 10.0,
                      poll_s: float = 5.0) -> tuple[EvalReport, str | None]:
    """``(report, measured_by)``: the report of ``inputs`` stored in ``directory`` and the run that measured
    it, else ``evaluate()``'s (stored when complete) and None. While another run holds the key's lock (a
    :class:`~wmrl.storage.lock.RunLock`: link-created, heartbeat, broken when stale; NFS-safe) this one
    waits for its report, polling every ``poll_s``."""
    directory.mkdir(parents=True, exist_ok=True)
    key = eval_key(inputs)
    path = directory / f"{key}.json"
    lock = RunLock(directory / f"{key}.lock", stale_s=stale_s, heartbeat_s=heartbeat_s)
    waiting = False
    while True:
        if path.is_file():
            return _stored(path)
        try:
            lock.acquire()
        except RunLockHeld:
            if not waiting:
                log.info("waiting for another run's evaluation of the same initial policy (%s)", path)
                waiting = True
            time.sleep(poll_s)
            continue
        try:
            if path.is_file():  # finished between our look and our lock
                return _stored(path)
            report = evaluate()
            if not any(t.failed or not t.scores for t in report.tasks):
                try:
                    atomic_write_json(path, {"inputs": inputs, "measured_by": run_id, "report": report.to_dict()})
                except (OSError, ValueError) as err:  # a full disk or a NaN: the run goes on, later runs measure
                    log.warning("the initial evaluation was not stored for later runs (%s): %s", path, err)
            return report, None
        finally:
            lock.release()


def _stored(path: Path) -> tuple[EvalReport, str]:
    stored = read_json(path)
    return EvalReport.from_dict(stored["report"]), str(stored["measured_by"])
