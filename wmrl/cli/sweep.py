"""``wmrl sweep SPEC [--executor local|slurm] [--max-parallel K] [--rerun NAME --why TEXT] [key=value ...]``.

Every run of the spec (``sweeps/*.yaml``, see docs/sweeps.md) gets its own run directory under
``RUNS_ROOT/sweeps/NAME/runs/`` and its own MLflow run, a child of the sweep's parent run. Issuing the
same command again skips finished runs and resumes the rest; ``--rerun NAME --why TEXT`` runs a run
again, keeping the old one under ``RUNS_ROOT/sweeps/NAME/superseded/`` (wmrl/sweep/rerun.py).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from wmrl.cli.args import add_command
from wmrl.config import load_config
from wmrl.sweep.rerun import Rerun
from wmrl.sweep.runner import EXECUTORS, prepare, run_sweep
from wmrl.sweep.spec import load_spec


def register(subparsers: Any) -> None:
    p = add_command(
        subparsers, "sweep", "run a sweep of runs (grid x seeds) under one MLflow parent run",
        __doc__)
    p.add_argument("spec", metavar="SPEC", help="sweep spec, e.g. sweeps/anchor_frac_wmax.yaml")
    p.add_argument("overrides", nargs="*", metavar="key=value",
                   help="config overrides for every run (runs_root=..., tracking.uri=...)")
    p.add_argument("--executor", choices=EXECUTORS, default="local", help="local processes or Slurm jobs")
    p.add_argument("--max-parallel", type=int, default=2, metavar="K",
                   help="runs at once (local processes, or Slurm jobs queued+running: the throttle)")
    p.add_argument("--rerun", action="append", metavar="NAME",
                   help="run this run again (repeatable): the old one is kept under SWEEP/superseded/ and its "
                        "MLflow run marked deleted (restorable)")
    p.add_argument("--why", metavar="TEXT", help="with --rerun: what was wrong with the run (recorded)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    spec = load_spec(args.spec)
    rerun = Rerun.from_args(args.rerun, args.why)
    prep = prepare(spec, _runs_root(spec, args.overrides), args.executor, tuple(args.overrides), rerun)
    print(f"sweep {spec.name}: {len(spec.runs)} runs in {prep.sweep.root}"
          + (f"; MLflow parent run {prep.parent_run_id}" if prep.parent_run_id else ""), flush=True)
    out = run_sweep(prep, args.executor, args.max_parallel)
    print(f"{len(out.finished)} run(s) finished now, {out.skipped} already finished, {len(out.failed)} failed "
          f"({out.wall_seconds:.1f} s)")
    for name, error in out.failed.items():
        print(f"  failed: {name}: {error}", file=sys.stderr)
    if out.failed:
        print(f"re-issue the same command to retry them: wmrl sweep {args.spec} ...", file=sys.stderr)
        return 1
    print(f"compare: wmrl compare {prep.sweep.root}")
    return 0


def _runs_root(spec: Any, overrides: list[str]) -> str:
    """``runs_root`` as the runs' config resolves it (the spec's config and overrides, then these)."""
    first = spec.runs[0]
    return load_config(spec.config, [*first.overrides, *overrides]).runs_root
