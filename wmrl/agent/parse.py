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

Fences are found by CommonMark's rules, with markdown-it-py (a CommonMark parser): an opening fence is
indented at most 3 spaces and its content lines lose that much indentation (a fence inside a list
item or a block quote works as rendered); a backtick fence's info string holds no backtick (so
"```python``` blocks are ..." is prose with inline code); a closing fence is indented at most 3 spaces,
repeats the opening character at least as often and has nothing after it; CR and CRLF end lines like
LF. A *code* block is a fence whose info string's first word is ``python``/``py``/``python3`` or that
has none; blocks in other languages (```text, ```bash) are prose.

Decided where CommonMark is silent about intent (docs/agent.md, "Reply parsing"):

- a code fence still open at the end of the reply (or of its list item / quote) is ``unclosed_fence``
  even after a closed code block: the reply was cut off inside a second block, and running the first
  would reward breaking the one-block rule; an unclosed fence of another language is prose;
- one leading byte-order mark (U+FEFF) is dropped: it is an encoding artefact, not text;
- the code comes back with LF line ends, trailing whitespace at its end stripped and one final newline;
  a NUL character becomes U+FFFD (CommonMark's rule).

A failed parse is a failed turn: the agent reads :func:`parse_feedback`, which says what was wrong and
what to send instead; it scores 0.
"""

from __future__ import annotations

from dataclasses import dataclass

from markdown_it import MarkdownIt

CODE_LANGUAGES = ("", "python", "py", "python3")
PARSE_OUTCOMES = ("ok", "no_code", "unclosed_fence", "several_blocks", "empty_code")
_MARKDOWN = MarkdownIt("commonmark")

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


@dataclass(frozen=True)
class _Fence:
    language: str  # the info string's first word, lower case
    first: int  # line of the opening fence
    last: int  # line after the block (after the closing fence when closed)
    closed: bool
    content: str


def _fences(lines_text: str) -> list[_Fence]:
    """Every fenced block, in order, nested ones (list items, quotes) included."""
    out = []
    for token in _MARKDOWN.parse(lines_text):
        if token.type != "fence" or token.map is None:
            continue
        first, last = token.map
        # markdown-it's map covers the closing fence when there is one: the content then has one line
        # fewer than the block (``lines_text`` ends with a newline, so every content line has one).
        closed = token.content.count("\n") == last - first - 2
        language = token.info.split()[0].lower() if token.info.split() else ""
        out.append(_Fence(language, first, last, closed, token.content))
    return out


def _normalise(text: str) -> str:
    text = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    return text if text.endswith("\n") else text + "\n"


def parse_reply(text: str) -> ParsedReply:
    """Split a reply into analysis and code by the rules in the module docstring."""
    text = _normalise(text)
    fences = _fences(text)
    code = [f for f in fences if f.language in CODE_LANGUAGES]
    closed = [f for f in code if f.closed]
    lines = text.split("\n")
    # The prose before the first code fence, the marker lines of prose fences before it removed.
    start = code[0].first if code else len(lines)
    markers = {f.first for f in fences if f.first < start} | {f.last - 1 for f in fences if f.closed and f.last <= start}
    analysis = "\n".join(line for i, line in enumerate(lines[:start]) if i not in markers).strip()
    n = len(closed)
    if len(closed) < len(code):
        return ParsedReply("unclosed_fence", analysis, None, n)
    if n > 1:
        return ParsedReply("several_blocks", analysis, None, n)
    if n == 1:
        if not closed[0].content.strip():
            return ParsedReply("empty_code", analysis, None, 1)
        return ParsedReply("ok", analysis, closed[0].content.rstrip() + "\n", 1)
    return ParsedReply("no_code", analysis, None, 0)


def parse_feedback(reply: ParsedReply) -> str:
    """The observation after an unparseable reply, in the environment's feedback layout."""
    return (
        f"Your reply was not run: {_EXPLAIN[reply.outcome].format(n=reply.n_blocks)}.\n"
        "Reply with 2-4 sentences of analysis, then ONE complete script in a single ```python fenced block.\n"
        "--- result ---\n"
        "No valid submission: no code was run. Position Score 0.\n"
    )
