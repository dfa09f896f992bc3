"""``wmrl plan CONFIG [key=value ...] [--json]``: will this config fit its GPUs and nodes?

The memory per GPU of the learner phase and of the generation phase, by component, and the host
memory per node (wmrl/planning/memory.py), for the config's allocation and the model's config.json, before
anything is queued. Exit 0 when it fits; exit 2 naming what does not fit and the overrides that would
make it fit. ``wmrl launch`` runs the same check before it submits.
"""

from __future__ import annotations

import argparse
import json

from wmrl.cli.args import add_command
from wmrl.config import load_config
from wmrl.planning.memory import plan_with_fixes, render


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers, "plan", "memory per GPU and per node of a config, before anything is queued (exit 2: does not fit)",
        __doc__)
    parser.add_argument("config", metavar="CONFIG", help="YAML config, e.g. configs/qwen3.5-4b.yaml")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    result = plan_with_fixes(load_config(args.config, args.overrides))
    print(json.dumps(result.as_json(), indent=2) if args.json else render(result), flush=True)
    return 0 if result.fits else 2
