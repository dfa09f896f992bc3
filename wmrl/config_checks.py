"""Config errors and the checks every config section declares (a leaf: imports nothing of wmrl).

A section is a dataclass deriving from :class:`Section`. It declares each field's check next to the
field, as field metadata, and writes only the checks that relate several fields by hand::

    @dataclass
    class AgentConfig(Section):
        KEY: ClassVar[str] = "agent"
        max_turns: int = field(default=4, metadata=in_range(1))
        keep: str = field(default="best", metadata=choice(("best", "last")))

        def check_together(self, prefix: str) -> None:
            ...  # e.g. one field's value bounded by another's

``section.validate(prefix)`` (one function, :func:`check_section`) runs the declared checks with the
full key, validates the nested sections, then calls ``check_together``: an error names the key, the
value and what is allowed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import fields
from functools import partial
from typing import Any, ClassVar


class ConfigError(ValueError):
    """A config value is missing, unknown, of the wrong type or out of range."""


# A field's declared check: called with the field's full key ("launch.executor") and its value, raises
# ConfigError. It lives in the field's metadata under CHECK.
Check = Callable[[str, Any], None]
CHECK = "wmrl.check"


def check_choice(key: str, value: Any, allowed: Collection[Any]) -> None:
    if value not in allowed:
        raise ConfigError(f"{key}={value!r} is not allowed; choose one of: {', '.join(map(str, allowed))}")


def check_range(
    key: str,
    value: float,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> None:
    """Check ``low <= value <= high`` (``<`` where open); NaN is always rejected."""
    bad = isinstance(value, float) and math.isnan(value)
    if low is not None:
        bad = bad or (value <= low if low_open else value < low)
    if high is not None:
        bad = bad or (value >= high if high_open else value > high)
    if bad:
        lo = "-inf" if low is None else f"{low}"
        hi = "inf" if high is None else f"{high}"
        interval = f"{'(' if low_open or low is None else '['}{lo}, {hi}{')' if high_open or high is None else ']'}"
        raise ConfigError(f"{key}={value!r} is out of range; allowed: {interval}")


# --------------------------------------------------------------------------- declared checks (field metadata)


def choice(allowed: Collection[Any]) -> dict[str, Check]:
    """``field(metadata=choice(ALLOWED))``: the value is one of ``allowed`` (a mapping: one of its keys)."""
    return {CHECK: partial(check_choice, allowed=allowed)}


def in_range(low: float | None = None, high: float | None = None, *, low_open: bool = False,
             high_open: bool = False) -> dict[str, Check]:
    """``field(metadata=in_range(low, high))``: ``low <= value <= high`` (``<`` where open; None: unbounded)."""
    return {CHECK: partial(check_range, low=low, high=high, low_open=low_open, high_open=high_open)}


def checked_by(check: Check) -> dict[str, Check]:
    """``field(metadata=checked_by(fn))``: a check of the field's own value that a choice or a range cannot say."""
    return {CHECK: check}


def each(item: Mapping[str, Check]) -> dict[str, Check]:
    """``field(metadata=each(in_range(0)))``: the check of every item of a list (key ``name[i]``) or every
    value of a mapping (key ``name.k``)."""
    return {CHECK: partial(_check_each, item[CHECK])}


def _check_each(check: Check, key: str, values: Any) -> None:
    if isinstance(values, Mapping):
        for name, value in values.items():
            check(f"{key}.{name}", value)
    else:
        for i, value in enumerate(values):
            check(f"{key}[{i}]", value)


# --------------------------------------------------------------------------- sections


class Section:
    """Base of every config section (a dataclass): ``validate`` runs its fields' declared checks, its
    nested sections' own, then its checks across fields (``check_together``)."""

    # The section's place in a run's config ("launch", "generation.vllm"): the default prefix of its keys.
    KEY: ClassVar[str] = ""

    def validate(self, prefix: str | None = None) -> None:
        check_section(self, self.KEY if prefix is None else prefix)

    def check_together(self, prefix: str) -> None:
        """Checks that relate several fields (run after every field's own); none unless a section has some."""


def check_section(section: Section, prefix: str) -> None:
    """Validate ``section`` whose keys start with ``prefix`` ("" at the top level)."""
    for spec in fields(section):  # type: ignore[arg-type]  # every Section is a dataclass
        key = f"{prefix}.{spec.name}" if prefix else spec.name
        value = getattr(section, spec.name)
        if CHECK in spec.metadata:
            spec.metadata[CHECK](key, value)
        if isinstance(value, Section):
            value.validate(key)
    section.check_together(prefix)
