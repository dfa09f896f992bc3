"""``wmrl cancel RUN_DIR``: end a run: mark it ended, then scancel its Slurm jobs.

The ``ENDED`` marker comes first: workers stop claiming, a coordinator stops at its next step
boundary; the SIGTERM of ``scancel`` then makes the coordinator save its last step boundary and the
workers put back what they hold. A later ``wmrl launch`` of the same run directory refuses to start
an ended run.
"""

from __future__ import annotations

import argparse
import sys

from wmrl.orchestration.rundir import RunDir
from wmrl.orchestration.slurm import cancel_jobs, job_states, load_jobs


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("cancel", help="end a run and scancel its Slurm jobs")
    parser.add_argument("run_dir", metavar="RUN_DIR")
    parser.add_argument("--reason", default="cancelled by user", help="recorded in RUN_DIR/ENDED")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        run_dir = RunDir.open(args.run_dir)
    except FileNotFoundError as err:
        print(f"wmrl cancel: {err}", file=sys.stderr)
        return 2
    already = run_dir.is_ended()
    run_dir.mark_ended(args.reason)
    records = load_jobs(run_dir)
    live = [job for job, states in job_states([r.job_id for r in records]).items() if states] if records else []
    cancel_jobs(live)
    state = f"already ended ({run_dir.ended_reason()})" if already else f"marked ended ({args.reason})"
    print(f"{run_dir.path}: {state}; scancel {' '.join(live) if live else '(no live Slurm jobs)'}")
    return 0
