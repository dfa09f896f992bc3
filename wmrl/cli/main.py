"""``wmrl`` command line: one module per subcommand under ``wmrl/cli/``.

Each subcommand module exposes ``register(subparsers)`` which adds its parser and sets
``func=run`` (a callable taking the parsed ``argparse.Namespace`` and returning an exit code).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from wmrl.config import ConfigError

# (module under wmrl.cli, help) in the order `wmrl --help` lists them.
SUBCOMMANDS: tuple[str, ...] = (
    "simulate",
    "tasks",
    "exec_cmd",
    "launch",
    "worker",
    "status",
    "cancel",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="wmrl",
        description="World Model RL for LLM research agents: simulate, build tasks, execute, launch on Slurm.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(f"wmrl.cli.{name}")
        except ModuleNotFoundError as err:
            if err.name == f"wmrl.cli.{name}":
                continue  # subcommand not built yet
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ConfigError as err:
        print(f"wmrl: config error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("wmrl: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
