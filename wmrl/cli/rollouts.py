"""``wmrl rollouts show RUN_DIR --step N``: read what the agent wrote and what the environment said."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from wmrl.agent.records import format_rollouts, read_rollouts, steps_written


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("rollouts", help="read a run's rollout records (agent replies, feedback, verdicts)")
    sub = parser.add_subparsers(dest="rollouts_command", required=True, metavar="ACTION")
    show = sub.add_parser("show", help="print one step's trajectories turn by turn")
    show.add_argument("run_dir", metavar="RUN_DIR")
    show.add_argument("--step", type=int, default=None, help="the step (default: the last one written)")
    show.add_argument("--group", type=int, default=None, help="only this group")
    show.add_argument("--trajectory", type=int, default=None, help="only this trajectory index in each group")
    show.add_argument("--full", action="store_true", help="do not shorten replies and feedback")
    show.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    run_dir = Path(args.run_dir)
    steps = steps_written(run_dir)
    if not steps:
        print(f"wmrl: no rollout records under {run_dir / 'rollouts'}", file=sys.stderr)
        return 2
    step = steps[-1] if args.step is None else args.step
    if step not in steps:
        print(f"wmrl: no rollouts for step {step} in {run_dir}; steps written: "
              f"{', '.join(map(str, steps[:20]))}{' ...' if len(steps) > 20 else ''}", file=sys.stderr)
        return 2
    header, groups = read_rollouts(run_dir, step)
    sys.stdout.write(format_rollouts(header, groups, None if args.full else 600, args.group, args.trajectory))
    return 0
