"""Reading the agent's reply: analysis, then ONE fenced Python block (paper, Appendix E).

Every reply has a defined outcome, never an exception:

==================  ==========================================================================
outcome             rule
==================  ==========================================================================
ok                  exactly one closed code block with code in it: that code is the submission
no_code             no code fence at all
unclosed_fence      a code fence is opened and never closed (typically cut at the token limit)
several_blocks      more than one closed code block: ambiguous, nothing is run (the prompt says so)
empty_code          one closed code block with nothing but whitespace in it
==================  ==========================================================================

A *code* block is a fence labelled ``python``/``py``/``python3`` or unlabelled; blocks in other
languages (```text, ```bash) are prose. A failed parse is a failed turn: the agent reads
:func:`parse_feedback`, which says what was wrong and what to send instead; it scores 0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CODE_LANGUAGES = ("", "python", "py", "python3")
PARSE_OUTCOMES = ("ok", "no_code", "unclosed_fence", "several_blocks", "empty_code")
_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([A-Za-z0-9_+-]*)[^\n]*$", re.MULTILINE)

_EXPLAIN = {
    "no_code": "your reply had no fenced Python code block",
    "unclosed_fence": "your code block was opened with ``` but never closed (was the reply cut off? keep it shorter)",
    "several_blocks": "your reply had {n} code blocks; exactly ONE is allowed, so none was run",
    "empty_code": "your code block was empty",
}


@dataclass(frozen=True)
class ParsedReply:
    outcome: str  # one of PARSE_OUTCOMES
    analysis: str  # the prose before the (first) code block, stripped
    code: str | None  # the script when outcome == "ok"
    n_blocks: int  # closed code blocks found

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"

    @property
    def error(self) -> str | None:
        """Why no code was taken, in words (``Turn.parse_error``), or None."""
        if self.ok:
            return None
        return f"{self.outcome}: " + _EXPLAIN[self.outcome].format(n=self.n_blocks)


def _blocks(text: str) -> tuple[list[tuple[str, int, int, int]], int | None]:
    """Closed blocks as (language, opening fence, start of content, end of content); and the position
    of an unclosed opening fence, if any. A closing fence repeats the opening character at least as
    often, with no language label."""
    blocks: list[tuple[str, int, int, int]] = []
    fences = list(_FENCE.finditer(text))
    i = 0
    while i < len(fences):
        opening = fences[i]
        mark = opening.group(1)
        close = next(
            (j for j in range(i + 1, len(fences))
             if fences[j].group(1)[0] == mark[0] and len(fences[j].group(1)) >= len(mark) and not fences[j].group(2)),
            None,
        )
        if close is None:
            return blocks, opening.start()
        blocks.append((opening.group(2).lower(), opening.start(), opening.end() + 1, fences[close].start()))
        i = close + 1
    return blocks, None


def parse_reply(text: str) -> ParsedReply:
    """Split a reply into analysis and code by the rules in the module docstring."""
    blocks, unclosed = _blocks(text)
    code_blocks = [b for b in blocks if b[0] in CODE_LANGUAGES]
    first = code_blocks[0][1] if code_blocks else unclosed
    # The prose before the first code fence (fences of prose blocks removed).
    analysis = _FENCE.sub("", text if first is None else text[:first]).strip()
    n = len(code_blocks)
    if n > 1:
        return ParsedReply("several_blocks", analysis, None, n)
    if n == 1:
        _, _, start, end = code_blocks[0]
        code = text[start:end]
        if not code.strip():
            return ParsedReply("empty_code", analysis, None, 1)
        return ParsedReply("ok", analysis, code.rstrip() + "\n", 1)
    if unclosed is not None:
        return ParsedReply("unclosed_fence", analysis, None, 0)
    return ParsedReply("no_code", analysis, None, 0)


def parse_feedback(reply: ParsedReply) -> str:
    """The observation after an unparseable reply, in the environment's feedback layout."""
    return (
        f"Your reply was not run: {_EXPLAIN[reply.outcome].format(n=reply.n_blocks)}.\n"
        "Reply with 2-4 sentences of analysis, then ONE complete script in a single ```python fenced block.\n"
        "--- result ---\n"
        "No valid submission: no code was run. Position Score 0.\n"
    )
