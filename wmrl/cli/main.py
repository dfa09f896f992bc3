"""``wmrl`` command line: one module per subcommand under ``wmrl/cli/``.

Each subcommand module exposes ``register(subparsers)`` which adds its parser and sets
``func=run`` (a callable taking the parsed ``argparse.Namespace`` and returning an exit code).

Every failure ends in one line on stderr and exit code 2 (130 for Ctrl-C); ``wmrl --debug ...`` (or
``WMRL_DEBUG=1``) prints the traceback as well. Output cut short by the reader (``wmrl ... | head -1``)
ends quietly.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback

from wmrl.cli.args import IntermixedParser
from wmrl.config import ConfigError

# (module under wmrl.cli, help) in the order `wmrl --help` lists them.
SUBCOMMANDS: tuple[str, ...] = (
    "simulate",
    "sweep",
    "compare",
    "tasks",
    "exec_cmd",
    "train",
    "plan",
    "launch",
    "coordinator",
    "worker",
    "status",
    "cancel",
    "model",
    "sft",
    "rollouts",
    "export",
    "eval_cmd",
    "sync",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="wmrl",
        description="World Model RL for LLM research agents: simulate, build tasks, execute, launch on Slurm.",
    )
    parser.add_argument("--debug", action="store_true", default=bool(os.environ.get("WMRL_DEBUG")),
                        help="print the traceback of an error (also: WMRL_DEBUG=1)")
    # Options anywhere: ``wmrl launch CONFIG --no-submit key=value`` as well as ``--no-submit CONFIG ...``.
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=IntermixedParser)
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
        return _fail(args, f"wmrl: config error: {err}")
    except FileNotFoundError as err:  # a run directory, config or model that is not there
        return _fail(args, f"wmrl {args.command}: {err}")
    except KeyboardInterrupt:
        print("wmrl: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`| head -1`): stop writing; Python would otherwise complain again
        # when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as err:  # noqa: BLE001 - the one place that turns any failure into a message
        return _fail(args, f"wmrl {args.command}: {err or type(err).__name__} ({type(err).__name__}; "
                           "wmrl --debug shows the traceback)")


def _fail(args: argparse.Namespace, message: str) -> int:
    if getattr(args, "debug", False):
        traceback.print_exc()
    print(" ".join(message.split()), file=sys.stderr)  # one line, whatever the message held
    return 2


if __name__ == "__main__":
    sys.exit(main())
