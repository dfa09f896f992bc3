"""What a worker does with a claimed request: a *work function* ``ExecutionRequest -> dict``.

The dict is the outcome payload published with the result; it must hold ``"score"`` (a finite number
in [0, 1], the true score of the solution). Work functions are made by a *factory* that gets the run
directory (to read the run's config), named on the command line as ``module:attribute``::

    wmrl worker RUN_DIR                                          # real_work: sandbox + grader
    wmrl worker RUN_DIR --work wmrl.execution.work:python_work   # plain Python, no sandbox

``python_work`` is a real but simple executor (a Python subprocess with a timeout, score read from
the last line it prints) for tests, benchmarks and dry runs of the plumbing.
"""

from __future__ import annotations

import importlib
import math
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from wmrl.execution.outcome import execute_and_grade
from wmrl.sandbox import limits_from_config, make_backend
from wmrl.storage.records import ExecutionRequest
from wmrl.storage.rundir import RunDir
from wmrl.tasks.layouts import LoadOptions
from wmrl.tasks.pool import load_pool, resolve_pool_root

WorkFn = Callable[[ExecutionRequest], dict[str, Any]]
WorkFactory = Callable[[RunDir], WorkFn]
DEFAULT_WORK = "wmrl.orchestration.anchors:real_work"


def load_work(spec: str, run: RunDir) -> WorkFn:
    """Resolve ``module:factory`` and build the work function for ``run``."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"--work {spec!r}: expected module:factory, e.g. {DEFAULT_WORK}")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"--work {spec!r}: cannot import it: {err}") from err
    return factory(run)


def config_work(cfg: Any, run_id: str) -> WorkFn:
    """Run a solution in ``cfg.sandbox`` and grade it against ``cfg.tasks``' hidden answers: the work of a
    run's workers (:func:`wmrl.orchestration.anchors.real_work` reads the run's config) and of ``wmrl eval``."""
    backend = make_backend(cfg.sandbox)
    root = resolve_pool_root(cfg.tasks)
    tasks = {task.task_id: task for task in load_pool(root, "all", LoadOptions.from_config(cfg.tasks))}
    base_limits = limits_from_config(cfg.sandbox)
    max_bytes = int(cfg.tasks.max_submission_mb * 2**20)
    # Node-local scratch, not the shared run directory.
    work_root = Path(cfg.sandbox.scratch_dir or tempfile.gettempdir()) / f"wmrl-work-{run_id}"

    def work(request: ExecutionRequest) -> dict[str, Any]:
        task = tasks.get(request.task_id)
        if task is None:
            raise KeyError(f"task {request.task_id!r} is not in the run's pool at {root}")
        limits = replace(base_limits, timeout_s=min(request.timeout_s, base_limits.timeout_s))
        outcome = execute_and_grade(task, request.code, backend, limits, work_root, max_bytes)
        return {**outcome.to_dict(), "score": outcome.grade.position_score}

    return work


def score_from_stdout(stdout: str) -> float:
    """The last non-empty line as a score in [0, 1]; anything else scores 0."""
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    try:
        score = float(lines[-1]) if lines else 0.0
    except ValueError:
        return 0.0
    return score if math.isfinite(score) and 0.0 <= score <= 1.0 else 0.0


def python_work(run: RunDir) -> WorkFn:
    """Run ``request.code`` with this Python in a fresh temp dir (no isolation); score = last line."""

    def work(request: ExecutionRequest) -> dict[str, Any]:
        start, children = time.monotonic(), _children_cpu()
        with tempfile.TemporaryDirectory(prefix=f"wmrl-{request.request_id}-") as tmp:
            try:
                proc = subprocess.run([sys.executable, "-c", request.code], cwd=tmp, check=False,
                                      capture_output=True,
                                      text=True, timeout=request.timeout_s)
            except subprocess.TimeoutExpired as err:
                out = err.stdout.decode() if isinstance(err.stdout, bytes) else (err.stdout or "")
                return {"score": 0.0, "status": "timeout", "exit_code": None, "stdout_tail": out[-2000:],
                        "stderr_tail": "", "wall_seconds": time.monotonic() - start,
                        "cpu_seconds": _children_cpu() - children}
        return {
            "score": score_from_stdout(proc.stdout) if proc.returncode == 0 else 0.0,
            "status": "ok" if proc.returncode == 0 else "error",
            "exit_code": proc.returncode,
            "stdout_tail": proc.stdout[-2000:],
            "stderr_tail": proc.stderr[-2000:],
            "wall_seconds": time.monotonic() - start,
            "cpu_seconds": _children_cpu() - children,
        }

    return work


def _children_cpu() -> float:
    """User + system CPU seconds of this process's reaped children (the program ``python_work`` ran)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def noop_work(run: RunDir) -> WorkFn:
    """Returns at once with a score derived from the request: measures pure queue overhead."""

    def work(request: ExecutionRequest) -> dict[str, Any]:
        return {"score": (request.traj_id % 10) / 10.0, "status": "ok"}

    return work
