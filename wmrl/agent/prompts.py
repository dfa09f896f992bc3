"""The agent's prompts (paper, Appendix E): a fixed system prompt of seven segments, the task
overview as the first user message.

The paper quotes the load-bearing passages verbatim and elides the rest with [...]; ``full`` keeps
every quoted passage word for word and fills the elisions with the obvious instruction, ``short`` says
the same seven things in a few lines for the tiny CPU default (whose context is small). Both are built
from the *probed* sandbox runtime, so the library list is the one the code will really meet.
"""

from __future__ import annotations

from dataclasses import dataclass

from wmrl.sandbox.probe import SandboxRuntime, table_runtime

PROMPT_STYLES = ("full", "short")
SEGMENTS = ("objective", "strategy", "contract", "runtime", "format", "feedback", "rules")


@dataclass(frozen=True)
class PromptContext:
    """What the system prompt states about the run: turns, time budget, GPU, runtime."""

    max_turns: int
    timeout_s: float
    gpus: int
    runtime: SandboxRuntime


def _gpu_line(ctx: PromptContext) -> str:
    if ctx.gpus > 0:
        return "A modern NVIDIA GPU (~40 GB) is available."
    return "No GPU is available: the code runs on CPU only, so keep models small."


def _full_segments(ctx: PromptContext) -> dict[str, str]:
    k = ctx.max_turns
    return {
        "objective": (
            f"You are an expert ML engineer competing to MAXIMIZE your leaderboard Position Score over UP TO "
            f"{k} attempts (Position Score = your percentile rank, higher = better; earned ONLY when your code "
            "runs and writes a VALID submission). Your best valid attempt is the one that counts."
        ),
        "strategy": (
            "PHASE 1 --- LAND A VALID SUBMISSION FIRST (turn 1): write a SIMPLE solution you are confident RUNS "
            "end-to-end and writes SUBMISSION_PATH in the exact required format. A valid submission is your "
            "safety net. Prefer a fast, robust baseline over an ambitious one.\n"
            "PHASE 2 --- IMPROVE INCREMENTALLY (later turns): START FROM YOUR LAST WORKING CODE, copy it, and "
            "change EXACTLY ONE thing per turn (a model, a feature, a hyperparameter). If a change ERRORS or "
            "scores WORSE, discard it and try a DIFFERENT single change. Never rewrite from scratch once "
            "something works."
        ),
        "contract": (
            "ENVIRONMENT CONTRACT (these Python variables are ALREADY defined when your code runs; they are also "
            "environment variables):\n"
            "- DATA_DIR: absolute path to the folder with the data files listed below (read-only).\n"
            "- SUBMISSION_PATH: absolute path to write your submission CSV to.\n"
            f"{_gpu_line(ctx)} There is no internet access. "
            "Do NOT hardcode '/kaggle/...', '/content/...', or any other path."
        ),
        "runtime": (
            f"Runtime: Python {ctx.runtime.python_short()} on Linux (this is the sandbox where YOUR code "
            f"executes). Installed libraries you may import (name version): {ctx.runtime.prompt_listing()}, "
            "and the Python standard library. Anything NOT in this list is not installed (e.g. no opencv, no jax)."
        ),
        "format": (
            "EACH TURN, respond in TWO parts, in this order, and nothing else:\n"
            "1) ANALYSIS (2-4 short sentences of plain text, FIRST): name exactly what went wrong and the ONE "
            "change that fixes it, or the ONE change you will make to raise the score.\n"
            "2) CODE: a SINGLE fenced Python block --- a complete, self-contained script. Exactly one block "
            "opened with ```python and closed with ```; a reply with no block or several blocks is not run."
        ),
        "feedback": (
            "After your code runs, the environment returns your print() output and --- if a valid submission was "
            "written --- your leaderboard Position and Raw Score; otherwise the full error traceback. Long "
            "output is truncated, so print only short summaries (shapes, a validation score)."
        ),
        "rules": (
            "Keep a valid submission as your fallback; only replace it with code that RUNS and scores BETTER. "
            "The submission CSV must match the required format EXACTLY (columns, row count, ids). Keep code "
            f"efficient so it finishes within the time limit ({ctx.timeout_s:.0f} s); it is killed after that."
        ),
    }


def _short_segments(ctx: PromptContext) -> dict[str, str]:
    return {
        "objective": f"You are an ML engineer. Maximize the leaderboard Position Score in up to {ctx.max_turns} "
        "attempts; only code that runs and writes a VALID submission scores.",
        "strategy": "Turn 1: a SIMPLE solution that surely runs. Later turns: copy your last working code and "
        "change ONE thing.",
        "contract": "DATA_DIR (data folder) and SUBMISSION_PATH (submission CSV) are predefined variables. "
        f"{_gpu_line(ctx)} No internet. No hardcoded paths.",
        "runtime": f"Python {ctx.runtime.python_short()}; installed: {ctx.runtime.prompt_listing()}. "
        "Nothing else is installed.",
        "format": "Reply: 2-4 sentences of analysis, then ONE ```python block with the complete script.",
        "feedback": "You get your printed output and Position Score, or the error traceback.",
        "rules": f"Match the submission format exactly. Finish within {ctx.timeout_s:.0f} s.",
    }


def system_prompt(ctx: PromptContext, style: str = "full") -> str:
    """The seven segments of Appendix E, in the paper's order."""
    if style not in PROMPT_STYLES:
        raise ValueError(f"prompt style {style!r}; allowed: {', '.join(PROMPT_STYLES)}")
    segments = _full_segments(ctx) if style == "full" else _short_segments(ctx)
    joiner = "\n\n" if style == "full" else "\n"
    return joiner.join(segments[name] for name in SEGMENTS)


def agent_messages(system: str, overview: str) -> list[dict[str, str]]:
    """The conversation the first turn renders: system prompt, then the task overview as user message."""
    return [{"role": "system", "content": system}, {"role": "user", "content": overview}]


def tokenizer_texts() -> list[str]:
    """Texts the tiny model's tokenizer is trained on (wmrl/models/corpus.py): both prompt styles and
    the parse feedback, so the agent's fixed text costs few tokens."""
    # markdown-it (the reply parser) off every config load's path: only the tokenizer corpus needs it
    from wmrl.agent.parse import parse_feedback, parse_reply

    ctx = PromptContext(max_turns=4, timeout_s=1200, gpus=0, runtime=table_runtime())
    replies = ("x", "```python\nprint(1)\n", "```python\na\n```\n```python\nb\n```")
    return [system_prompt(ctx, style) for style in PROMPT_STYLES] + [parse_feedback(parse_reply(r)) for r in replies]
