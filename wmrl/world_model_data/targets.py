"""The strict JSON each check SHOULD answer, derived from a really executed outcome.

Used as SFT targets for the tiny world model and as the reference answer when a verdict is judged.
The failing aspect follows the exception class (the ``error_type`` of the outcome); every other
failure check passes; the quality check always predicts the *reference's* real position score
("assuming the code runs and writes a valid submission", so a bug does not change the model's quality).
"""

from __future__ import annotations

import json

from wmrl.world_model.prompts import QUALITY
from wmrl.world_model_data.variants import Outcome

# Exception class -> the check whose failure mode it is (the rest: "runtime").
CHECK_OF_ERROR = {
    "ModuleNotFoundError": "imports", "ImportError": "imports", "NameError": "imports",
    "AttributeError": "api", "TypeError": "api",
    "FileNotFoundError": "files_columns", "KeyError": "files_columns",
    "ValueError": "shapes", "IndexError": "shapes",
    "TimeoutError": "compute", "MemoryError": "compute",
    "InvalidSubmission": "submission",
}
PASS_REASON = "No such failure: the code does not trigger this check."


def failing_check(outcome: Outcome, checks: list[str] | tuple[str, ...]) -> str | None:
    """The configured check that should fail for ``outcome`` (None when it produced a valid submission)."""
    if outcome.valid:
        return None
    if outcome.status in ("timeout", "memory", "disk_quota", "killed"):  # resource limits
        wanted = "compute"
    elif outcome.status == "ok":
        wanted = "submission"
    else:
        wanted = CHECK_OF_ERROR.get(outcome.error_type or "", "runtime")
    for name in (wanted, "runtime", *checks):
        if name in checks and name != QUALITY:
            return name
    return None


def target_json(check: str, outcome: Outcome, quality_score: float, checks: list[str] | tuple[str, ...]) -> str:
    """The one-line strict JSON answer of ``check`` for this outcome."""
    if check == QUALITY:
        answer = {"reason": "Predicted leaderboard position of this approach.", "verdict": "pass",
                  "confidence": round(float(quality_score), 2), "error_type": None, "error_line": None,
                  "env_feedback": outcome.stdout}
    elif check == failing_check(outcome, checks):
        where = f" at line {outcome.error_line}" if outcome.error_line else ""
        answer = {"reason": f"{outcome.error_type or 'The code fails'}{where}.", "verdict": "fail",
                  "confidence": 1.0, "error_type": outcome.error_type, "error_line": outcome.error_line,
                  "env_feedback": outcome.error_text}
    else:
        answer = {"reason": PASS_REASON, "verdict": "pass", "confidence": 0.9, "error_type": None,
                  "error_line": None, "env_feedback": ""}
    return json.dumps(answer, ensure_ascii=False)
