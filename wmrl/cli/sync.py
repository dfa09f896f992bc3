"""``wmrl sync RUN_DIR``: send what a run could not send to its tracking store (MLflow) at the time.

A run whose tracking server was down kept its records in ``RUN_DIR/tracking/``; this sends them in
order, creating the MLflow run first if it never got one. Sending twice changes nothing (see
:mod:`wmrl.tracking.outbox`), so it is safe to run while the run is still going or more than once.
"""

from __future__ import annotations

import argparse
import sys

from wmrl.config import load_config
from wmrl.storage.rundir import RunDir
from wmrl.tracking.run_tracker import sync_run


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("sync", help="send a run's unsent tracking records to MLflow")
    parser.add_argument("run_dir", metavar="RUN_DIR")
    parser.add_argument("overrides", nargs="*", metavar="tracking.KEY=VALUE",
                        help="e.g. tracking.uri=http://newhost:5000 if the server moved")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    run_dir = RunDir.open(args.run_dir)
    bad = [o for o in args.overrides if not o.startswith("tracking.")]
    if bad:
        print(f"wmrl sync: only tracking.* keys can be overridden, got: {' '.join(bad)}", file=sys.stderr)
        return 2
    cfg = load_config(run_dir.config_path, args.overrides)
    if not cfg.tracking.enabled:
        print(f"{run_dir.path}: tracking is off for this run; nothing to send")
        return 0
    report = sync_run(run_dir.path, cfg.tracking)
    if report.error:
        print(f"wmrl sync: sent {report.sent} record(s), {report.pending} still pending: {cfg.tracking.uri} "
              f"failed: {report.error}", file=sys.stderr)
        return 2
    print(f"{run_dir.path}: sent {report.sent} record(s) to {cfg.tracking.uri}; nothing pending")
    return 0
