"""The one check of a score (a position score, r or r_hat): a finite real number in [0, 1]."""

from __future__ import annotations

import math
from numbers import Real
from typing import Any


def check_score(value: Any, name: str = "score") -> float:
    """``value`` as a float; ValueError naming ``name`` when it is not a finite number in [0, 1]
    (booleans and strings are refused: a score that arrives as one is a bug upstream)."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ValueError(f"{name}={value!r} is not a number; scores must lie in [0, 1]")  # noqa: TRY004 (callers catch one type)
    x = float(value)
    if not math.isfinite(x) or not 0.0 <= x <= 1.0:
        raise ValueError(f"{name}={value!r} is not a finite number in [0, 1]")
    return x
