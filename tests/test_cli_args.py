"""Every subcommand takes its options anywhere: after its positionals as well as before them."""

from __future__ import annotations

import argparse

import pytest

from wmrl.cli.main import build_parser


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    subs = _subcommands(parser)
    if not subs:
        return [(path, parser)]
    return [leaf for name, sub in subs.items() for leaf in _leaves(sub, (*path, name))]


LEAVES = _leaves(build_parser())


def _option(parser: argparse.ArgumentParser) -> list[str] | None:
    """One option of the parser with a valid value, as command-line words."""
    for action in parser._actions:
        if not action.option_strings or action.dest in ("help", "debug") or action.nargs in ("*", "+"):
            continue  # an option taking a list would take the positionals after it, in any parser
        if action.nargs == 0:
            return [action.option_strings[-1]]
        if action.choices:
            return [action.option_strings[-1], str(list(action.choices)[-1])]
        if action.type in (None, str):
            return [action.option_strings[-1], "v"]
        if action.type in (int, float):
            return [action.option_strings[-1], "3"]
    return None


def _positionals(parser: argparse.ArgumentParser) -> list[str]:
    words = []
    for action in parser._get_positional_actions():
        words += ["a=1"] if action.nargs in ("*", "+") else ["p"]
    return words


# Subcommands with both an option and a positional to interleave (the others have nothing to reorder).
INTERLEAVED = [(p, parser) for p, parser in LEAVES if _option(parser) is not None and _positionals(parser)]


@pytest.mark.parametrize("path, parser", INTERLEAVED, ids=[" ".join(p) for p, _ in INTERLEAVED])
def test_an_option_after_the_positionals_parses_like_before_them(path, parser):
    option, positionals = _option(parser), _positionals(parser)
    # A list positional last (``key=value`` overrides) gets one more word after the option.
    more = ["b=2"] if parser._get_positional_actions()[-1].nargs in ("*", "+") else []
    before = build_parser().parse_args([*path, *option, *positionals, *more])
    after = build_parser().parse_args([*path, *positionals, *option, *more])
    assert vars(before) == vars(after)


def test_launch_takes_overrides_after_a_flag():
    args = build_parser().parse_args(["launch", "run.yaml", "--no-submit", "a=1", "b=2"])
    assert (args.config, args.no_submit, args.overrides) == ("run.yaml", True, ["a=1", "b=2"])
