"""The world model's prompts (paper, Appendix E): one simulator system prompt shared by eight
single-aspect checks; each check's user prompt is the case block (the task overview and the agent's
code with 1-indexed line numbers) followed by the check's instruction (the paper's order is the
reverse; see :func:`check_user_prompt` for why).

``full`` keeps the paper's quoted passages word for word; ``short`` says the same six things in a few
lines for the tiny CPU default. The library list is the probed sandbox runtime's.
"""

from __future__ import annotations

from dataclasses import dataclass

from wmrl.sandbox.probe import SandboxRuntime, table_runtime

PROMPT_STYLES = ("full", "short")
QUALITY = "quality"


@dataclass(frozen=True)
class Check:
    name: str
    title: str
    instruction: str  # what to look for, in the paper's single-aspect style
    error_types: str  # typical exception classes for this aspect


# The paper's eight aspects, in its order. The last one scores instead of failing.
CHECKS: tuple[Check, ...] = (
    Check("imports", "IMPORTS AND NAMES",
          "Does the code import a module that is NOT installed in the sandbox, or use a name (variable, function, "
          "module alias) that is never defined or imported before the line that uses it?",
          "ModuleNotFoundError, ImportError, NameError"),
    Check("api", "API CALLS VS INSTALLED VERSIONS",
          "Does the code call a function, method, class or keyword argument that does not exist (or was removed) in "
          "the INSTALLED version of its library, or call it with arguments of the wrong kind?",
          "AttributeError, TypeError, ImportError"),
    Check("files_columns", "FILE AND COLUMN REFERENCES",
          "Does the code read a file that is NOT in the DATA INVENTORY, or reference a column that does NOT exist in "
          "the file it reads (check every name against the inventory, exactly, including case)?",
          "FileNotFoundError, KeyError"),
    Check("shapes", "SHAPES AND DTYPES",
          "Does the code combine arrays or frames of incompatible shapes, or pass data of a dtype the call cannot "
          "handle (strings into a numeric model, NaN into an estimator that rejects it)?",
          "ValueError, TypeError, IndexError"),
    Check("compute", "COMPUTE BUDGET",
          "Will the code exceed the time limit or the memory of the sandbox given the data sizes in the inventory "
          "(e.g. quadratic work on many rows, huge models, too many epochs)?",
          "TimeoutError, MemoryError"),
    Check("runtime", "OTHER RUNTIME ERRORS",
          "Does any OTHER line raise an exception when run (not imports, API versions, files/columns, shapes or "
          "compute, which other checks cover)?",
          "any Python exception"),
    Check("submission", "SUBMISSION VALIDITY",
          "Assuming the code runs to the end: does it write SUBMISSION_PATH with EXACTLY the columns, row count and "
          "ids of the SUBMISSION CONTRACT? verdict=fail when the file is missing, misnamed or malformed.",
          "InvalidSubmission"),
    Check(QUALITY, "SOLUTION QUALITY",
          "Assuming the code runs and writes a valid submission: how good is it? Put your predicted leaderboard "
          "Position Score (0 = worst, 1 = best) in \"confidence\", verdict=pass, and the printed output you expect "
          "(e.g. the validation score it prints) in env_feedback.",
          "null"),
)
CHECK_NAMES: tuple[str, ...] = tuple(c.name for c in CHECKS)
JSON_KEYS = ("reason", "verdict", "confidence", "error_type", "error_line", "env_feedback")
OUTPUT_FORMAT = (
    '{"reason": "<= 2 sentences, the specific cause>", "verdict": "<pass|fail>", "confidence": <float 0..1>, '
    '"error_type": "<exception class or null>", "error_line": <int or null>, '
    '"env_feedback": "<what the sandbox would print: the traceback on fail>"}'
)


@dataclass(frozen=True)
class WorldModelContext:
    """What the world model's system prompt says of the sandbox: time limit, GPUs, installed runtime."""

    timeout_s: float
    gpus: int
    runtime: SandboxRuntime


def simulator_system_prompt(ctx: WorldModelContext, style: str = "full") -> str:
    if style not in PROMPT_STYLES:
        raise ValueError(f"prompt style {style!r}; allowed: {', '.join(PROMPT_STYLES)}")
    gpu = "ONE ~40GB GPU available" if ctx.gpus > 0 else "NO GPU (CPU only)"
    py = ctx.runtime.python_short()
    if style == "short":
        return "\n".join((
            ("You are an execution-and-grading SIMULATOR for Kaggle Python solutions. You do not run code; you "
            "predict what the sandbox reports."),
            (f"Sandbox: Python {py}, {gpu}, installed: {ctx.runtime.prompt_listing()}. Killed at "
            f"{ctx.timeout_s:.0f}s. DATA_DIR and SUBMISSION_PATH are predefined."),
            "Check ONLY the aspect asked, against the TASK OVERVIEW and the numbered CODE.",
            "DEFAULT TO PASS; fail only with a specific line and a certain reason.",
            "On fail give the line, the exception class and a realistic traceback in env_feedback.",
            f"Output STRICT JSON only: {OUTPUT_FORMAT}",
        ))
    return "\n\n".join((
        ("You are a precise execution-and-grading SIMULATOR for Kaggle/MLE Python solutions. You do NOT execute "
        "code. You predict --- by careful static analysis --- exactly what the real sandbox would report."),
        (f"Sandbox: Python {py} on Linux, {gpu}. Installed (name version): {ctx.runtime.prompt_listing()}; "
        f"nothing else. Execution is killed at {ctx.timeout_s:.0f}s. The code reads data from "
        "os.environ['DATA_DIR'] and MUST write predictions to os.environ['SUBMISSION_PATH'] (both are also "
        "predefined Python variables). There is no network."),
        ("You are given the TASK OVERVIEW (with a DATA INVENTORY: real files, columns, row counts, dtypes, and the "
        "sample_submission format) and the agent's CODE (its lines are 1-indexed as shown). Analyze ONLY the "
        "failure mode this check asks about."),
        ("CRITICAL --- DEFAULT TO PASS. Real submissions usually RUN FINE; most code does NOT trigger this check's "
        "failure mode. Return verdict='fail' ONLY when you can cite a SPECIFIC line and a CONCRETE, CERTAIN reason "
        "it raises this exact error. A false 'fail' on working code is WORSE than a missed error. When in doubt, "
        "PASS."),
        ("If you do fail it, be concrete: identify the EXACT offending source line, its line number, the precise "
        "Python exception class, and the real error message. The agent will READ your env_feedback to fix its "
        "code next turn, so env_feedback MUST look byte-similar to the real sandbox output (a Python traceback "
        "through File \"solution.py\", line N)."),
        f"Output STRICT JSON only, no prose around it: {OUTPUT_FORMAT}",
    ))


def numbered(code: str) -> str:
    """The code with 1-indexed line numbers, as every check shows it."""
    lines = code.splitlines() or [""]
    width = len(str(len(lines)))
    return "\n".join(f"{i:>{width}}| {line}" for i, line in enumerate(lines, 1))


def check_user_prompt(check: Check, overview: str, code: str, max_overview_chars: int | None = None) -> str:
    """The case block, then the check's instruction. An overview beyond its budget keeps its head.

    The paper puts the instruction first; we put the case block first so that the eight checks of one
    solution share their whole prompt up to ``CHECK:``. vLLM's prefix cache and our SFT packer
    (:func:`wmrl.sft.example.pack_rows`) then read the overview and the code once, not eight times
    (world-model SFT tokens per pass: about 6x fewer on the built-in pool)."""
    if max_overview_chars is not None and len(overview) > max_overview_chars:
        overview = overview[:max_overview_chars].rstrip() + "\n[... overview truncated ...]"
    return (
        f"=== TASK OVERVIEW ===\n{overview.rstrip()}\n\n=== CODE ===\n{numbered(code)}\n\n"
        f"CHECK: {check.title}\n{check.instruction}\nTypical error types: {check.error_types}.\n\n"
        "Answer with the JSON object only."
    )


def check_messages(system: str, check: Check, overview: str, code: str,
                   max_overview_chars: int | None = None) -> list[dict[str, str]]:
    return [{"role": "system", "content": system},
            {"role": "user", "content": check_user_prompt(check, overview, code, max_overview_chars)}]


def get_checks(names: list[str] | tuple[str, ...]) -> tuple[Check, ...]:
    by_name = {c.name: c for c in CHECKS}
    return tuple(by_name[n] for n in names)


def tokenizer_texts() -> list[str]:
    """Texts the tiny model's tokenizer is trained on (wmrl/models/corpus.py): both simulator prompts,
    every check's instruction and the JSON answer shapes."""
    ctx = WorldModelContext(timeout_s=1200, gpus=0, runtime=table_runtime())
    import json

    tb = 'Traceback (most recent call last):\n  File "solution.py", line 12, in <module>\nKeyError: \'label\''
    answers = [json.dumps({"reason": "No such failure: the code does not trigger this check.", "verdict": "pass",
                           "confidence": 0.9, "error_type": None, "error_line": None, "env_feedback": ""}),
               json.dumps({"reason": "KeyError at line 12.", "verdict": "fail", "confidence": 1.0,
                           "error_type": "KeyError", "error_line": 12, "env_feedback": tb})]
    return ([simulator_system_prompt(ctx, style) for style in PROMPT_STYLES]
            + [check_user_prompt(c, "", "") for c in CHECKS] + answers)
