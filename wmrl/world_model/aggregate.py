"""From the eight verdicts to the predicted score r_hat and the simulated feedback.

The rule (paper, Appendix E: "failures cap the score, a valid solution is scored by the quality
check"), made exact:

- the quality check's ``confidence`` is the predicted Position Score q in [0, 1];
- a failing check k with confidence c_k caps the score at 1 - c_k (a certain failure, c = 1, caps it
  at 0, the score of code that crashes or writes no valid submission; an unsure one caps it a little);
- r_hat = min(q, min over failing checks of (1 - c_k)); without a failing check r_hat = q;
- the solution is *predicted to fail* when some failing check has c_k >= ``fail_threshold`` (0.5):
  the agent then reads that check's simulated traceback (the most confident failure; ties go to the
  earlier check, in the paper's order), otherwise it reads a valid-submission report.

A fallback verdict (unparseable answer) is a pass with confidence 0, so it caps nothing; a fallback
quality answer gives q = the configured prior.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from wmrl.world_model.prompts import QUALITY
from wmrl.world_model.verdict import CheckVerdict


@dataclass(frozen=True)
class Prediction:
    r_hat: float
    predicted_valid: bool
    deciding: str | None  # the check whose failure the agent reads, None when predicted valid
    feedback: str


def _failure_text(v: CheckVerdict) -> str:
    error = v.env_feedback.strip()
    if not error:
        where = f'  File "solution.py", line {v.error_line}, in <module>\n' if v.error_line else ""
        error = f"Traceback (most recent call last):\n{where}{v.error_type or 'Error'}: {v.reason or 'failed'}"
    if v.check == "submission":
        return ("Execution finished (status: ok).\n--- printed output ---\n(nothing printed)\n--- result ---\n"
                f"No valid submission: {error}. Position Score 0.\n")
    if v.check == "compute":
        return ("Execution exceeded the time limit and was stopped.\n--- printed output ---\n(nothing printed)\n"
                f"--- error ---\n{error}\n--- result ---\n"
                "No valid submission: the code did not finish successfully (status: timeout). Position Score 0.\n")
    return ("Execution failed (status: error, exit code 1).\n--- printed output ---\n(nothing printed)\n"
            f"--- error ---\n{error}\n--- result ---\n"
            "No valid submission: the code did not finish successfully (status: error). Position Score 0.\n")


def _valid_text(r_hat: float, quality: CheckVerdict | None, leaderboard_size: int | None) -> str:
    printed = (quality.env_feedback.strip() if quality else "") or "(nothing printed)"
    if leaderboard_size:
        # The position whose score (N - p + 1) / N is nearest r_hat, as the real feedback reports it.
        position = min(max(round(leaderboard_size * (1.0 - r_hat) + 1), 1), leaderboard_size)
        where = f"Position {position} of {leaderboard_size} on the leaderboard (Position Score {r_hat:.3f})."
    else:
        where = f"Position Score {r_hat:.3f}."
    return f"Execution finished (status: ok).\n--- printed output ---\n{printed}\n--- result ---\nValid submission. {where}\n"


def aggregate(verdicts: Sequence[CheckVerdict], leaderboard_size: int | None = None,
              fail_threshold: float = 0.5, prior: float = 0.5) -> Prediction:
    quality = next((v for v in verdicts if v.check == QUALITY), None)
    q = quality.confidence if quality is not None else prior
    failing = [v for v in verdicts if v.check != QUALITY and v.failed]
    cap = min((1.0 - v.confidence for v in failing), default=1.0)
    r_hat = float(min(max(q, 0.0), cap))
    decisive = [v for v in failing if v.confidence >= fail_threshold]
    if decisive:
        worst = max(decisive, key=lambda v: v.confidence)  # max() keeps the first of equals
        return Prediction(r_hat, False, worst.check, _failure_text(worst))
    return Prediction(r_hat, True, None, _valid_text(r_hat, quality, leaderboard_size))
