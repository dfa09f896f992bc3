"""Config errors and the value checks every config section uses (a leaf: imports nothing of wmrl).

Each section's ``validate(prefix)`` calls these with the full key, so an error names the key, the value
and what is allowed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


class ConfigError(ValueError):
    """A config value is missing, unknown, of the wrong type or out of range."""


def check_choice(key: str, value: Any, allowed: Sequence[Any]) -> None:
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
