"""Argument parsing shared by the subcommands that take ``[CONFIG] key=value`` overrides."""

from __future__ import annotations

import argparse
from typing import Any

from wmrl.config import ConfigError


class IntermixedParser(argparse.ArgumentParser):
    """Lets positionals come after options too (``wmrl launch CONFIG --no-submit key=value``): every
    subcommand's parser is one (``wmrl/cli/main.py``). A parser with subcommands of its own dispatches
    plainly (argparse cannot intermix those); its subcommands' parsers intermix."""

    _inside = False

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        dispatches = any(a.nargs in (argparse.PARSER, argparse.REMAINDER) for a in self._get_positional_actions())
        if self._inside or dispatches:  # parse_known_intermixed_args calls back into parse_known_args
            return super().parse_known_args(args, namespace)
        self._inside = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._inside = False


def add_command(subparsers: Any, name: str, help: str, doc: str | None) -> argparse.ArgumentParser:
    """A subcommand whose ``--help`` description is the first line of its module's docstring ``doc``."""
    return subparsers.add_parser(name, help=help, description=doc.splitlines()[0] if doc else None)


def add_config_args(parser: argparse.ArgumentParser, config: str = "YAML config") -> None:
    """The ``[CONFIG] [key=value ...]`` arguments of a command (read back by :func:`split_config_args`);
    ``config`` says what the config file is (and its default)."""
    parser.add_argument("args", nargs="*", metavar="[CONFIG] [key=value ...]", help=f"{config}, then overrides")


def split_config_args(args: list[str]) -> tuple[str | None, list[str]]:
    """``[CONFIG] [key=value ...]``: the first argument is the config file unless it is an override."""
    config = None
    if args and "=" not in args[0]:
        config, args = args[0], args[1:]
    stray = [a for a in args if "=" not in a]
    if stray:
        raise ConfigError(f"expected key=value overrides after the config file, got: {' '.join(stray)}")
    return config, args
