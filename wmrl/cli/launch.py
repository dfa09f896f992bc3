"""``wmrl launch CONFIG [key=value ...]``: create the run directory and start the run.

``launch.executor=slurm`` submits the coordinator job and the anchor worker array with submitit and
returns (``--wait`` blocks until the run ends); ``launch.executor=local`` runs the coordinator in this
process with ``launch.workers`` local worker processes. Launching an existing run directory with the
same config resumes it from its latest checkpoint.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from wmrl.cli.args import add_command
from wmrl.cli.status import collect, render
from wmrl.config import ConfigError, WMRLConfig, as_written_now, load_config, to_yaml
from wmrl.orchestration.coordinator import Coordinator
from wmrl.orchestration.launch import submit_run
from wmrl.slurm.client import (
    COORDINATOR,
    WORKERS,
    active_tasks,
    live_jobs,
    load_jobs,
    sbatch_command_options,
    template_path,
)
from wmrl.slurm.preflight import preflight
from wmrl.storage.lock import RunLock, RunLockHeld
from wmrl.storage.rundir import RunDir, config_mismatch, create_run_dir


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers, "launch", "start a run: coordinator + anchor workers (Slurm via submitit, or local)",
        __doc__)
    parser.add_argument("config", metavar="CONFIG",
                        help="YAML config (e.g. configs/e2e-local.yaml), or a run directory to relaunch it "
                             "with its own config")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    parser.add_argument("--wait", action="store_true",
                        help="slurm: block until the run has ended, printing its status every --every s")
    parser.add_argument("--every", type=float, default=15.0, metavar="S", help="status interval of --wait")
    parser.add_argument("--resume", action="store_true",
                        help="continue a run that was cancelled (or stopped) from its latest checkpoint")
    parser.add_argument("--no-submit", action="store_true",
                        help="only write the run directory and print the sbatch commands (the package's "
                             "templates, absolute paths) that start it (coordinator.sbatch runs "
                             "`wmrl coordinator RUN_DIR`)")
    parser.set_defaults(func=run)


def _refuse_if_running(run: RunDir, stale_s: float) -> str | None:
    probe = RunLock(run.lock_path, stale_s)
    seen = probe.read_holder()
    if seen is not None and probe.stale_reason(*seen) is None:
        return f"{run.path} is in use by a coordinator ({seen[0].describe()}); see `wmrl status {run.path}`"
    if (run.path / "jobs").is_dir():
        waiting = live_jobs(run, COORDINATOR)
        if waiting:
            return (f"{run.path} has a coordinator job in Slurm ({', '.join(waiting)}, pending or running); "
                    f"see `wmrl status {run.path}`, or `wmrl cancel {run.path}` first")
    return None


def _load(args: argparse.Namespace) -> WMRLConfig:
    """CONFIG is a YAML file, or a run directory (relaunch with the config it was created with)."""
    config = Path(args.config)
    given_run_dir = config.is_dir()
    if given_run_dir:
        if not (config / "config.yaml").is_file():
            raise ConfigError(f"{config} is a directory but not a wmrl run directory (no config.yaml)")
        config = config / "config.yaml"
    cfg = load_config(config, args.overrides)
    if given_run_dir and Path(cfg.run_dir).resolve() != config.parent.resolve():
        # A moved run directory: its config still names the old place, and launching would start a new,
        # empty run there instead of resuming this one.
        raise ConfigError(f"{config.parent} was created as {cfg.run_dir} (runs_root + run_name in its config.yaml) "
                          f"and has moved; move it back, or set runs_root: {config.parent.parent.resolve()} in "
                          f"{config} to relaunch it where it is")
    cfg.tracking = cfg.tracking.absolute()  # the coordinator job may run in another directory
    return cfg


def _refuse_if_ended(run: RunDir, resume: bool) -> str | None:
    """An ended run is not restarted, unless ``--resume`` asks to continue a cancelled one."""
    if not run.is_ended():
        return None
    reason = run.ended_reason()
    if reason == "finished":
        return f"{run.path} has finished; use a new run_name for a new run"
    if not resume:
        return f"{run.path} has ended ({reason}); `wmrl launch {run.path} --resume` continues it"
    run.reopen()
    return None


def run(args: argparse.Namespace) -> int:
    cfg = _load(args)
    preflight(cfg)  # PreflightError (exit 2) before anything is created or queued
    run_dir = RunDir(cfg.run_dir)
    if run_dir.config_path.exists():  # a relaunch: same config, no live coordinator, not ended
        refusal = (_refuse_if_running(run_dir, cfg.launch.timing.lock_stale_s)
                   or config_mismatch(run_dir, to_yaml(cfg), as_written_now)
                   or _refuse_if_ended(run_dir, args.resume))
        if refusal:
            print(f"wmrl launch: {refusal}", file=sys.stderr)
            return 2
    run_dir = create_run_dir(cfg.run_dir, to_yaml(cfg), cfg.launch.group, as_written_now)
    print(f"run dir:  {run_dir.path}")
    if args.no_submit:
        _print_sbatch_commands(cfg, run_dir)
        return 0
    if cfg.launch.executor == "local":
        print(f"executor: local (coordinator in this process, {cfg.launch.workers} worker processes)")
        print(f"watch:    wmrl status {run_dir.path}   (from another shell)", flush=True)
        try:
            result = Coordinator(str(run_dir.path))()
        except RunLockHeld as err:
            print(f"wmrl launch: {err}", file=sys.stderr)
            return 2
        print(f"finished: {result}")
        return 0 if result.get("state") == "finished" else 1


    adopted = live_jobs(run_dir, WORKERS) if (run_dir.path / "jobs").is_dir() else []
    coordinator, workers = submit_run(cfg, run_dir)
    print(f"executor: slurm (submitit; logs in {run_dir.logs / 'submitit'})")
    how = "adopted: still pending or running" if workers in adopted else f"array of {cfg.launch.workers}"
    print(f"jobs:     coordinator {coordinator}, workers {workers} ({how})")
    print(f"watch:    wmrl status {run_dir.path}")
    print(f"cancel:   wmrl cancel {run_dir.path}", flush=True)
    if not args.wait:
        return 0
    return wait_for_end(run_dir, args.every)


def _print_sbatch_commands(cfg: WMRLConfig, run: RunDir) -> None:
    """What starts the run with plain sbatch (the package's templates, absolute paths: the lines work from
    any directory and from a pip install); nothing is submitted here."""
    coordinator, workers = ("".join(f"{o} " for o in sbatch_command_options(cfg, role)) for role in (COORDINATOR, WORKERS))
    path = run.path.resolve()  # runs_root may be relative to where `wmrl launch` ran
    print(f"start:    sbatch {coordinator}{template_path('coordinator.sbatch')} {path}")
    if cfg.launch.executor == "slurm":
        print(f"          sbatch {workers}{template_path('workers.sbatch')} {path}")
    else:
        print(f"          (launch.executor=local: the coordinator job runs {cfg.launch.workers} worker processes)")
    print(f"templates: {template_path('coordinator.sbatch').parent} (also vllm-serve.sbatch, mlflow-server.sbatch)")
    print(f"watch:    wmrl status {path}", flush=True)


def wait_for_end(run_dir: RunDir, every_s: float) -> int:
    while True:
        time.sleep(every_s)
        info = collect(run_dir)
        print(render(info, brief=True), flush=True)
        if run_dir.is_ended():
            return 0 if run_dir.ended_reason() == "finished" else 1
        coordinators = [r.job_id for r in load_jobs(run_dir) if r.kind == "coordinator"]
        if coordinators and active_tasks(coordinators) == 0:
            print("wmrl launch: the coordinator job is gone but the run has not ended; see "
                  f"{run_dir.logs}", file=sys.stderr)
            return 1
