"""``wmrl sweep``: run every run of a spec that has not finished, under one MLflow parent run.

Executors (``--executor``):

- ``local``: up to ``--max-parallel`` runs at once on this machine (simulate runs in forked pool
  processes; launch runs as ``wmrl launch ... launch.executor=local`` processes).
- ``slurm``: each run is its own job, at most ``--max-parallel`` of them queued or running at once
  (the throttle; the driver submits the next one when one ends). Simulate runs are one submitit job
  each (the coordinator's executor from ``wmrl/slurm/client.py``); launch runs are
  ``wmrl launch ... launch.executor=slurm --wait``: a coordinator job plus its own worker array.

A re-issued sweep (same spec, same command) skips finished runs, logs computed-but-unlogged ones,
waits for jobs still queued or running from the previous issue, and starts the rest.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wmrl.config import ConfigError, WMRLConfig, as_written_now
from wmrl.io import atomic_write_json, atomic_write_text
from wmrl.progress import Progress, progress_display
from wmrl.slurm.client import (
    COORDINATOR,
    check_slurm_available,
    clean_slurm_environment,
    job_states,
    slurm_executor,
)
from wmrl.storage.rundir import RunDir, config_mismatch, stored_config_diff
from wmrl.sweep.rerun import Rerun, link_reruns, supersede
from wmrl.sweep.simulate_run import compute, log_run
from wmrl.sweep.spec import SweepSpec, run_config, run_configs
from wmrl.sweep.state import SWEEP_JOB, SweepDir, has_result, is_finished, live_job
from wmrl.sweep.storage import tracking_warning
from wmrl.tracking.store import experiment_id

log = logging.getLogger(__name__)
EXECUTORS = ("local", "slurm")


@dataclass
class SweepOutcome:
    root: Path
    parent_run_id: str | None
    total: int
    skipped: int  # finished before this issue
    finished: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    wall_seconds: float = 0.0


@dataclass
class Prepared:
    spec: SweepSpec
    sweep: SweepDir
    configs: dict[str, WMRLConfig]  # run name -> resolved config
    overrides: tuple[str, ...]  # what the sweep adds to every run's own overrides
    tracked: bool
    parent_run_id: str | None

    def path(self, name: str) -> Path:
        return self.sweep.run_path(name)


def _parent_run(spec: SweepSpec, sweep: SweepDir, base: WMRLConfig, state: dict[str, Any]) -> str | None:
    """The sweep's MLflow parent run: created on the first issue, reopened on the next ones."""
    if not base.tracking.enabled:
        return None
    from mlflow.tracking import MlflowClient


    client = MlflowClient(base.tracking.uri)
    if state.get("parent_run_id"):
        client.update_run(state["parent_run_id"], status="RUNNING")
        return str(state["parent_run_id"])
    run = client.create_run(experiment_id(client, base.tracking), run_name=f"sweep-{spec.name}",
                            tags={"wmrl.kind": "sweep", "wmrl.sweep": spec.name, "wmrl.sweep_dir": str(sweep.root)})
    client.log_param(run.info.run_id, "sweep.runs", len(spec.runs))
    client.log_param(run.info.run_id, "sweep.digest", spec.digest())
    sweep.update(parent_run_id=run.info.run_id, tracking_uri=base.tracking.uri)
    return str(run.info.run_id)


def prepare(spec: SweepSpec, runs_root: str | Path, executor: str, extra: tuple[str, ...] = (),
            rerun: Rerun | None = None) -> Prepared:
    """Validate every run's config, open the sweep directory and its parent run, supersede the runs to
    run again (``rerun``, wmrl/sweep/rerun.py), write run configs."""
    sweep = SweepDir.for_spec(spec, runs_root)
    base = run_config(spec, spec.runs[0], sweep.runs, extra)  # fails on a bad spec before anything exists
    state, added = sweep.open(spec)
    tracking_uri = base.tracking.absolute().uri
    base.tracking.uri = tracking_uri
    parent = _parent_run(spec, sweep, base, state)
    own = (*extra, f"tracking.uri={tracking_uri}", *([f"tracking.parent_run_id={parent}"] if parent else []))
    if spec.kind == "launch":
        own = (*own, f"launch.executor={executor}")
    resolved = run_configs(spec, sweep.runs, own)
    paths: dict[str, Path] = {}
    for name, (_, text) in resolved.items():
        # simulate: the run directory's config.yaml; launch: the file `wmrl launch` is given (it creates
        # and checks the run directory itself)
        path = sweep.run_path(name) / "config.yaml" if spec.kind == "simulate" else launch_config(sweep, name)
        paths[name] = path
        # compared as this version writes the stored config: an upgrade that added keys continues the sweep
        if path.name == "config.yaml":
            mismatch = config_mismatch(RunDir(path.parent), text, as_written_now)
        else:
            diff = stored_config_diff(path, text, as_written_now)
            mismatch = None if diff is None else f"{path} exists with a different config ({diff})"
        if mismatch:
            raise ConfigError(f"{spec.source}, run {name} (the spec or the command line changed it): {mismatch}")
    if rerun:  # once every config has been checked, before a simulate run's config.yaml is written anew
        supersede(sweep, spec, rerun, tracking_uri if base.tracking.enabled else None)
    for name, (_, text) in resolved.items():
        if not paths[name].exists():
            paths[name].parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(paths[name], text)
    if added:
        sweep.extend(spec)
        print(f"sweep {spec.name}: the spec adds {len(added)} run(s): {', '.join(added)}", file=sys.stderr)
    configs = {name: cfg for name, (cfg, _) in resolved.items()}
    return Prepared(spec, sweep, configs, own, base.tracking.enabled, parent)


def run_sweep(prep: Prepared, executor: str, max_parallel: int, progress: bool | None = None) -> SweepOutcome:
    if executor not in EXECUTORS:
        raise ConfigError(f"--executor {executor!r} is not allowed; choose one of: {', '.join(EXECUTORS)}")
    if max_parallel < 1:
        raise ConfigError(f"--max-parallel {max_parallel} must be >= 1")
    started = time.perf_counter()
    names = list(prep.configs)
    done = [n for n in names if is_finished(prep.spec.kind, prep.path(n), prep.tracked)]
    outcome = SweepOutcome(prep.sweep.root, prep.parent_run_id, len(names), len(done))
    todo = [n for n in names if n not in set(done)]
    warning = tracking_warning(next(iter(prep.configs.values())).tracking.uri,
                               writers=max_parallel if prep.spec.kind == "launch" else 1)
    if warning:
        print(f"wmrl sweep: warning: {warning}", file=sys.stderr)
    bar = progress_display(len(names), f"sweep {prep.spec.name}", "run", initial=len(done), show=progress)
    try:
        if prep.spec.kind == "simulate":
            _run_simulate(prep, todo, executor, max_parallel, outcome, bar)
        else:
            _run_launch(prep, todo, executor, max_parallel, outcome, bar)
    finally:
        bar.close()
    link_reruns(prep.sweep, prep.configs[names[0]].tracking.uri if prep.tracked else None)
    if prep.parent_run_id and not outcome.failed:
        from mlflow.tracking import MlflowClient

        MlflowClient(prep.configs[names[0]].tracking.uri).set_terminated(prep.parent_run_id, "FINISHED")
    outcome.wall_seconds = time.perf_counter() - started
    return outcome


# --------------------------------------------------------------------------- simulate runs


def _safe_compute(job: tuple[str, WMRLConfig]) -> tuple[str, str | None]:
    run_dir, cfg = job
    try:
        return compute(run_dir, cfg), None
    except Exception as err:  # noqa: BLE001 - one failed run must not stop the others
        return run_dir, f"{type(err).__name__}: {err}"


def _finish(prep: Prepared, name: str, error: str | None, outcome: SweepOutcome, bar: Progress,
            log: bool = True) -> None:
    """Count a run that ended; a computed simulate run is logged to MLflow first (one writer)."""
    if error is None and log and prep.tracked:
        try:
            log_run(prep.path(name), prep.spec.name, prep.configs[name])
        except Exception as err:  # noqa: BLE001 - the result is kept; the next issue logs it
            error = f"computed, but MLflow logging failed ({type(err).__name__}: {err}); re-issue to log it"
    if error is None:
        outcome.finished.append(name)
        bar.update(1)
    else:
        outcome.failed[name] = error
        bar.set_postfix(failed=len(outcome.failed))


def _run_simulate(prep: Prepared, todo: list[str], executor: str, k: int, outcome: SweepOutcome, bar: Progress) -> None:
    for name in [n for n in todo if has_result(prep.path(n))]:  # computed by an earlier issue, not logged
        _finish(prep, name, None, outcome, bar)
    todo = [n for n in todo if not has_result(prep.path(n))]
    if executor == "slurm":
        _throttled(prep, todo, k, outcome, bar, submit=_submit_simulate_job,
                   done=lambda n: has_result(prep.path(n)))
        return
    paths = [(str(prep.path(n)), prep.configs[n]) for n in todo]
    if k <= 1 or len(paths) <= 1:
        stream: Iterator[tuple[str, str | None]] = map(_safe_compute, paths)
        pool = None
    else:  # fork: the children inherit the imported modules, so a run starts in milliseconds
        ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else mp.get_context()
        pool = ctx.Pool(processes=k)
        stream = pool.imap_unordered(_safe_compute, paths)
    try:
        for run_dir, error in stream:
            _finish(prep, Path(run_dir).name, error, outcome, bar)
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()


def _submit_simulate_job(prep: Prepared, name: str) -> str:
    check_slurm_available()
    run = RunDir(prep.path(name))
    executor = slurm_executor(prep.configs[name], run, COORDINATOR)
    executor.update_parameters(job_name=f"wmrl-sweep-{prep.spec.name}-{name}"[:100])
    with clean_slurm_environment():
        job = executor.submit(compute, str(run.path))
    return str(job.job_id)


# --------------------------------------------------------------------------- the Slurm throttle


def _throttled(prep: Prepared, todo: list[str], k: int, outcome: SweepOutcome, bar: Progress,
               submit: Callable[[Prepared, str], str], done: Callable[[str], bool], poll_s: float = 1.0) -> None:
    """At most ``k`` runs queued or running at once; the next is submitted when one ends."""
    in_flight: dict[str, str] = {}
    queue = []
    for name in todo:
        live = live_job(prep.path(name))
        if live:
            in_flight[name] = live  # still queued or running from an earlier issue: wait for it
        else:
            queue.append(name)
    while queue or in_flight:
        while queue and len(in_flight) < k:
            name = queue.pop(0)
            in_flight[name] = submit(prep, name)
            atomic_write_json(prep.path(name) / SWEEP_JOB, {"job_id": in_flight[name], "at": time.time()})
        bar.set_postfix(in_flight=len(in_flight), queued=len(queue))
        time.sleep(poll_s)
        states = job_states(list(in_flight.values()))
        for name, job_id in list(in_flight.items()):
            if done(name):
                del in_flight[name]
                _finish(prep, name, None, outcome, bar)
            elif not any(s in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED")
                         for s in states.get(job_id, [])) and not done(name):
                del in_flight[name]
                _finish(prep, name, f"job {job_id} ended without a result (logs: "
                        f"{prep.path(name) / 'logs' / 'submitit' / job_id})", outcome, bar)


# --------------------------------------------------------------------------- launch runs


def launch_config(sweep: SweepDir, name: str) -> Path:
    return sweep.root / "configs" / f"{name}.yaml"


def _launch_argv(prep: Prepared, name: str) -> list[str]:
    """``wmrl launch`` as a user would type it for this run: its resolved config file (sweep overrides,
    runs_root and the parent run included); ``--resume`` continues a run a killed sweep left stopped."""
    cfg = prep.configs[name]
    argv = [sys.executable, "-m", "wmrl.cli.main", "launch", str(launch_config(prep.sweep, name)), "--resume"]
    if cfg.launch.executor == "slurm":
        argv += ["--wait", "--every", "2"]
    return argv


def _run_launch(prep: Prepared, todo: list[str], executor: str, k: int, outcome: SweepOutcome, bar: Progress) -> None:
    """Up to ``k`` ``wmrl launch`` processes at once; each blocks until its run has ended."""
    logs = prep.sweep.root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    running: dict[str, subprocess.Popen[bytes]] = {}
    queue = list(todo)
    while queue or running:
        while queue and len(running) < k:
            name = queue.pop(0)
            with open(logs / f"{name}.log", "ab") as out:
                running[name] = subprocess.Popen(_launch_argv(prep, name), stdout=out, stderr=subprocess.STDOUT)
        time.sleep(0.5)
        for name, proc in list(running.items()):
            if proc.poll() is None:
                continue
            del running[name]
            ok = is_finished("launch", prep.path(name), prep.tracked)  # the coordinator logged it itself
            error = None if ok else f"wmrl launch exited {proc.returncode} (log: {logs / name}.log)"
            _finish(prep, name, error, outcome, bar, log=False)
