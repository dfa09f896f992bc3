"""``wmrl cancel RUN_DIR``: end a run: mark it ended, then scancel its Slurm jobs.

The ``ENDED`` marker comes first: workers stop claiming and exit, a live coordinator stops within a
few seconds (at once while it waits for executions), saves its last step, writes the final plots and
marks the MLflow run KILLED, on every executor alike. ``wmrl cancel`` waits for that (``--wait-s``),
then scancels what is left of the Slurm jobs (a coordinator still running then gets SIGTERM and ends
the same way, as fast as it can). ``wmrl launch RUN_DIR --resume`` continues a cancelled run.
"""

from __future__ import annotations

import argparse
import time

from wmrl.config import load_config
from wmrl.slurm.client import cancel_jobs, job_states, load_jobs
from wmrl.storage.health import coordinator_health
from wmrl.storage.rundir import RunDir


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("cancel", help="end a run and scancel its Slurm jobs")
    parser.add_argument("run_dir", metavar="RUN_DIR")
    parser.add_argument("--reason", default="cancelled by user", help="recorded in RUN_DIR/ENDED")
    parser.add_argument("--wait-s", type=float, default=120.0, metavar="S",
                        help="how long to let the coordinator end by itself before scancel (default 120)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    run_dir = RunDir.open(args.run_dir)
    cfg = load_config(run_dir.config_path)
    already = run_dir.is_ended()
    run_dir.mark_ended(args.reason)
    stale_s = cfg.launch.timing.lock_stale_s
    if coordinator_health(run_dir, stale_s).state == "alive":
        print(f"waiting up to {args.wait_s:.0f} s for the coordinator to stop (final checkpoint, plots) ...",
              flush=True)
        deadline = time.monotonic() + args.wait_s
        while time.monotonic() < deadline and coordinator_health(run_dir, stale_s).state == "alive":
            time.sleep(1.0)
    records = load_jobs(run_dir)
    live = [job for job, states in job_states([r.job_id for r in records]).items() if states] if records else []
    cancel_jobs(live)
    state = f"already ended ({run_dir.ended_reason()})" if already else f"marked ended ({args.reason})"
    print(f"{run_dir.path}: {state}; scancel {' '.join(live) if live else '(no live Slurm jobs)'}")
    return 0
