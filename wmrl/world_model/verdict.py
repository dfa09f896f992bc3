"""Reading one check's answer: strict JSON ``{reason, verdict, confidence, error_type, error_line,
env_feedback}``, recovered from code fences and prose around it, with a defined and counted fallback.

Every answer gets one ``status``:

=========  ================================================================================
ok         the whole answer is exactly one JSON object with valid fields
repaired   a usable object was found, but something had to be fixed: it sat inside a code fence
           or prose, a key was missing or unknown, the confidence was out of [0, 1] or not a
           number, the error line outside the code, the feedback too long (``problems`` says what)
fallback   nothing usable (empty, not text, no JSON object, no pass/fail verdict): the check counts
           as the calibration policy's default, ``pass`` with confidence 0 (the quality check:
           the configured prior score), and ``problems`` says why
=========  ================================================================================

Whatever the value types (``Infinity``, ``1e400``, ``2.5``, ``true``, nested lists, JSON nested
deeper than the parser's recursion limit), the answer gets one of these statuses; an unexpected error
inside the parser itself is a fallback with the problem ``parser_error:<type>``, never an exception.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from wmrl.world_model.prompts import JSON_KEYS

VERDICT_STATUSES = ("ok", "repaired", "fallback")
MAX_FEEDBACK_CHARS = 4000
MAX_REASON_CHARS = 500
_FENCED = re.compile(r"```[A-Za-z]*\s*\n?(.*?)```", re.DOTALL)


@dataclass
class CheckVerdict:
    check: str
    verdict: str  # "pass" or "fail"
    confidence: float  # in [0, 1]; for the quality check: the predicted Position Score
    error_type: str | None
    error_line: int | None
    env_feedback: str
    reason: str
    status: str  # one of VERDICT_STATUSES
    problems: list[str] = field(default_factory=list)
    source: str = "llm"  # "llm" or "precheck"

    @property
    def failed(self) -> bool:
        return self.verdict == "fail"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _objects(text: str) -> list[tuple[dict, int, int]]:
    """Every top-level JSON object in ``text`` as (object, start, end)."""
    decoder = json.JSONDecoder()
    found: list[tuple[dict, int, int]] = []
    i = text.find("{")
    while i != -1:
        try:
            obj, end = decoder.raw_decode(text, i)
        except (ValueError, RecursionError):  # JSONDecodeError is a ValueError; nesting deeper than the stack
            i = text.find("{", i + 1)
            continue
        if isinstance(obj, dict):
            found.append((obj, i, end))
            i = text.find("{", end)
        else:
            i = text.find("{", i + 1)
    return found


def extract_object(text: str) -> tuple[dict | None, list[str]]:
    """The answer's JSON object and what had to be done to find it."""
    stripped = text.strip()
    if not stripped:
        return None, ["empty"]
    try:
        obj = json.loads(stripped)
        if isinstance(obj, dict):
            return obj, []
        return None, ["not_an_object"]
    except (ValueError, RecursionError):
        pass
    for body in _FENCED.findall(stripped):
        try:
            obj = json.loads(body.strip())
        except (ValueError, RecursionError):
            continue
        if isinstance(obj, dict):
            return obj, ["fenced"]
    candidates = _objects(stripped)
    if not candidates:
        return None, ["no_json_object"]
    # The first object that looks like a verdict; prose may quote other small dicts.
    best = next((c for c in candidates if "verdict" in c[0]), candidates[0])
    return best[0], ["prose_around"]


def _fallback(check: str, problems: list[str], prior: float) -> CheckVerdict:
    return CheckVerdict(check, "pass", prior, None, None, "", "", "fallback", problems)


def _as_text(value: Any, limit: int, key: str, problems: list[str]) -> str:
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value)
    if len(text) > limit:
        problems.append(f"{key}_too_long")
        text = text[:limit] + " [...]"
    return text


def _confidence(value: Any, problems: list[str]) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an int beyond float range
        problems.append("confidence_not_a_number")
        return None
    if math.isnan(number):
        problems.append("confidence_not_a_number")
        return None
    if not 0.0 <= number <= 1.0:
        problems.append("confidence_out_of_range")
        number = min(max(number, 0.0), 1.0)  # clipped: guessing "85 means 0.85" would be a second rule
    return number


def _as_line_number(value: Any) -> int | None:
    """An integer line number from an int, an integral finite float (``3.0``) or a string of digits;
    None for anything else (``2.5``, ``Infinity``, ``1e400``, ``true``, lists)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if math.isfinite(value) and value.is_integer() else None
    if isinstance(value, str) and value.strip().lstrip("+-").isdigit() and len(value) < 20:
        return int(value.strip())
    return None


def _error_line(value: Any, n_lines: int, problems: list[str]) -> int | None:
    if value is None or value == "" or value == "null":
        return None
    line = _as_line_number(value)
    if line is None:
        problems.append("error_line_not_an_int")
        return None
    if not 1 <= line <= n_lines:
        problems.append("error_line_out_of_range")
        return None
    return line


def parse_verdict(text: Any, check: str, n_lines: int, prior: float = 0.0) -> CheckVerdict:
    """Parse one check's answer; never raises. ``prior`` is the fallback confidence (quality score)."""
    if text is not None and not isinstance(text, str):
        return _fallback(check, [f"not_text:{type(text).__name__}"], prior)
    try:
        return _parse(text or "", check, n_lines, prior)
    except Exception as err:  # noqa: BLE001 - the documented promise: any answer is a counted fallback
        return _fallback(check, [f"parser_error:{type(err).__name__}"], prior)


def _parse(text: str, check: str, n_lines: int, prior: float) -> CheckVerdict:
    obj, problems = extract_object(text)
    if obj is None:
        return _fallback(check, problems, prior)
    unknown = sorted(set(obj) - set(JSON_KEYS))
    missing = [k for k in JSON_KEYS if k not in obj]
    if unknown:
        problems.append("unknown_keys:" + ",".join(unknown[:5]))
    verdict = str(obj.get("verdict", "")).strip().lower()
    if verdict not in ("pass", "fail"):
        return _fallback(check, problems + ["no_pass_fail_verdict"], prior)
    if missing:
        problems.append("missing_keys:" + ",".join(missing))
    confidence = _confidence(obj.get("confidence"), problems) if "confidence" in obj else None
    if confidence is None:
        confidence = prior if verdict == "pass" else 1.0  # a bare "fail" is taken at its word
    error_type = obj.get("error_type")
    error_type = None if error_type in (None, "", "null", "None") else _as_text(error_type, 100, "error_type", problems)
    result = CheckVerdict(
        check=check,
        verdict=verdict,
        confidence=confidence,
        error_type=error_type,
        error_line=_error_line(obj.get("error_line"), n_lines, problems),
        env_feedback=_as_text(obj.get("env_feedback"), MAX_FEEDBACK_CHARS, "env_feedback", problems),
        reason=_as_text(obj.get("reason"), MAX_REASON_CHARS, "reason", problems),
        status="repaired" if problems else "ok",
        problems=problems,
    )
    return result
