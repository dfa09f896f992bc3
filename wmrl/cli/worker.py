"""``wmrl worker RUN_DIR``: one anchor worker (a Slurm array task, or a local process)."""

from __future__ import annotations

import argparse
import logging
import sys

from wmrl.config import load_config
from wmrl.execution.work import DEFAULT_WORK, load_work
from wmrl.execution.worker import Worker, default_worker_id, worker_log_handler
from wmrl.storage.rundir import RunDir


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "worker", help="claim, execute and publish anchor executions of a run until it ends",
        description="Claim requests from RUN_DIR/anchors/queue, execute and grade them, publish the "
                    "results; exits when the run ends, after an idle timeout, or on SIGTERM/SIGUSR1 "
                    "(releasing its claim). Logs to RUN_DIR/logs/worker-<id>.log.")
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the run directory (on shared storage)")
    parser.add_argument("--worker-id", default=None,
                        help="default: <host>-<array job>_<array task>-<pid> in Slurm, <host>-<pid> elsewhere")
    parser.add_argument("--idle-timeout", type=float, default=None, metavar="S",
                        help="exit after S seconds without work (default: launch.timing.idle_timeout_s)")
    parser.add_argument("--work", default=None, metavar="MODULE:FACTORY",
                        help=f"work function factory (default: the run's launch.work, normally "
                             f"{DEFAULT_WORK}: sandbox + grader)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    run_dir = RunDir.open(args.run_dir)  # not there: main() says so and exits 2
    if args.idle_timeout is not None and args.idle_timeout <= 0:
        print(f"wmrl worker: --idle-timeout {args.idle_timeout} must be > 0", file=sys.stderr)
        return 2
    cfg = load_config(run_dir.config_path)
    worker_id = args.worker_id or default_worker_id()
    root = logging.getLogger("wmrl")
    root.setLevel(logging.INFO)
    root.addHandler(worker_log_handler(run_dir, worker_id))
    try:
        work = load_work(args.work or cfg.launch.work, run_dir)
    except ValueError as err:
        print(f"wmrl worker: {err}", file=sys.stderr)
        return 2
    try:
        worker = Worker(run_dir, work, cfg.launch, worker_id, args.idle_timeout)
    except ValueError as err:
        print(f"wmrl worker: {err}", file=sys.stderr)
        return 2
    return worker.run()
