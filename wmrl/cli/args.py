"""Argument parsing shared by the subcommands that take ``[CONFIG] key=value`` overrides."""

from __future__ import annotations

import argparse
from typing import Any


class IntermixedParser(argparse.ArgumentParser):
    """Lets ``key=value`` overrides come after options too (``--seeds 5 simulator.phi=bump``)."""

    _inside = False

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        if self._inside:  # parse_known_intermixed_args calls back into parse_known_args
            return super().parse_known_args(args, namespace)
        self._inside = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._inside = False


def split_config_args(args: list[str]) -> tuple[str | None, list[str]]:
    """``[CONFIG] [key=value ...]``: the first argument is the config file unless it is an override."""
    from wmrl.config import ConfigError

    config = None
    if args and "=" not in args[0]:
        config, args = args[0], args[1:]
    stray = [a for a in args if "=" not in a]
    if stray:
        raise ConfigError(f"expected key=value overrides after the config file, got: {' '.join(stray)}")
    return config, args
