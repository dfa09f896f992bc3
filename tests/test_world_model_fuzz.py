"""Fuzz: nothing a world model or its server returns makes the verdict parser or the HTTP backend raise."""

from __future__ import annotations

import json
import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wmrl.world_model.prompts import JSON_KEYS
from wmrl.world_model.verdict import VERDICT_STATUSES, parse_verdict

JSON_SCALARS = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True)
                | st.text(max_size=20))
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)
VERDICT_LIKE = st.fixed_dictionaries({}, optional={k: JSON_VALUES | st.sampled_from(["pass", "fail"])
                                                   for k in JSON_KEYS})
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _check(verdict) -> None:
    assert verdict.status in VERDICT_STATUSES and verdict.verdict in ("pass", "fail")
    assert 0.0 <= verdict.confidence <= 1.0
    assert verdict.error_line is None or 1 <= verdict.error_line <= 10


@FUZZ
@given(st.binary(max_size=300))
def test_parse_verdict_never_raises_on_random_bytes(data):
    _check(parse_verdict(data.decode("utf-8", "replace"), "imports", 10))
    _check(parse_verdict(data.decode("latin-1"), "quality", 10, 0.5))


@FUZZ
@given(VERDICT_LIKE, st.sampled_from(["{}", "```json\n{}\n```", "prose {} prose", "{} {}"]))
def test_parse_verdict_never_raises_on_random_json_values(obj, layout):
    text = layout.replace("{}", json.dumps(obj))  # json.dumps writes Infinity/NaN as Python's json reads them
    _check(parse_verdict(text, "imports", 10))


@FUZZ
@given(JSON_VALUES | st.text(alphabet=string.printable + "{}[]\"", max_size=200))
def test_parse_verdict_never_raises_on_any_value(value):
    _check(parse_verdict(value if isinstance(value, str) else json.dumps(value), "quality", 10, 0.5))
    _check(parse_verdict(value, "quality", 10, 0.5))  # not even when the value is not text
