"""Reply parsing: analysis + exactly one fenced Python block; every other shape has a defined outcome."""

import re
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wmrl.agent.parse import parse_feedback, parse_reply

GOOD = "The target is `label`. We fit a forest.\n\n```python\nimport pandas as pd\nprint(1)\n```\n"


def test_one_block_gives_the_code_and_the_analysis_before_it():
    reply = parse_reply(GOOD)
    assert reply.outcome == "ok" and reply.error is None
    assert reply.code == "import pandas as pd\nprint(1)\n"
    assert reply.analysis == "The target is `label`. We fit a forest."


def test_no_block_is_no_code():
    reply = parse_reply("I would fit a forest here.")
    assert (reply.outcome, reply.code) == ("no_code", None)
    assert reply.error.startswith("no_code")


def test_unclosed_fence_is_its_own_outcome():
    reply = parse_reply("Analysis.\n```python\nimport pandas as pd\nx = 1\n")
    assert (reply.outcome, reply.code) == ("unclosed_fence", None)
    assert reply.analysis == "Analysis."


def test_several_code_blocks_run_nothing():
    reply = parse_reply("A.\n```python\nprint(1)\n```\nB.\n```python\nprint(2)\n```\n")
    assert (reply.outcome, reply.code, reply.n_blocks) == ("several_blocks", None, 2)
    assert "2 code blocks" in reply.error


def test_blocks_in_other_languages_are_prose():
    reply = parse_reply("Output was:\n```text\nacc 0.9\n```\nNow:\n```py\nprint(3)\n```\n")
    assert (reply.outcome, reply.code) == ("ok", "print(3)\n")


def test_unlabelled_block_counts_as_code():
    assert parse_reply("x\n```\nprint(4)\n```").code == "print(4)\n"


def test_empty_block_is_empty_code():
    assert parse_reply("x\n```python\n   \n```\n").outcome == "empty_code"


def test_longer_fence_is_closed_only_by_a_fence_as_long():
    reply = parse_reply("x\n````python\ns = '''\n```\n'''\n````\n")
    assert reply.outcome == "ok" and "```" in reply.code


def test_failed_parse_feedback_says_what_was_wrong_and_scores_zero():
    text = parse_feedback(parse_reply("x\n```python\nprint(1)\n```\n```python\nprint(2)\n```"))
    assert "2 code blocks" in text and "ONE" in text and "Position Score 0" in text


# CommonMark's fence rules (the findings, each failing on the line-regex parser).

def test_a_fence_inside_a_list_item_loses_the_fences_indentation():
    reply = parse_reply("Plan:\n1. Fit a model:\n   ```python\n   def f():\n       return 1\n   f()\n   ```\n")
    assert (reply.outcome, reply.code) == ("ok", "def f():\n    return 1\nf()\n")
    compile(reply.code, "solution.py", "exec")


def test_a_fence_line_indented_four_spaces_inside_the_code_does_not_close_the_block():
    code = "def show():\n    s = f'''\n    ```\n    {1}'''\n    return s\n"
    reply = parse_reply(f"A.\n```python\n{code}```\n")
    assert (reply.outcome, reply.code) == ("ok", code)


def test_backticks_after_the_opening_backticks_make_inline_code_not_a_fence():
    reply = parse_reply("```python``` blocks are what you asked for.\n\n```python\nprint(1)\n```\n")
    assert (reply.outcome, reply.code) == ("ok", "print(1)\n")
    assert reply.analysis.startswith("```python``` blocks")


def test_a_fence_indented_four_spaces_is_an_indented_code_block_not_a_fence():
    assert parse_reply("A.\n    ```python\n    print(1)\n    ```\n").outcome == "no_code"


def test_a_closing_fence_must_be_at_least_as_long_and_bare():
    assert parse_reply("A.\n````python\nx = 1\n```\n").outcome == "unclosed_fence"
    assert parse_reply("A.\n```python\nx = 1\n``` trailing\n").outcome == "unclosed_fence"
    assert parse_reply("A.\n```python\nx = 1\n`````\n").code == "x = 1\n"


def test_tilde_fences_and_info_strings_with_attributes():
    assert parse_reply("A.\n~~~python\nx = '```'\n~~~\n").code == "x = '```'\n"
    assert parse_reply('A.\n```python title="main.py"\nx = 1\n```\n').code == "x = 1\n"


# The debatable cases, decided (module docstring, docs/agent.md).

def test_a_reply_cut_off_inside_a_second_code_block_runs_nothing():
    reply = parse_reply("A.\n```python\nprint(1)\n```\nAnd also:\n```python\nprint(2\n")
    assert (reply.outcome, reply.code, reply.n_blocks) == ("unclosed_fence", None, 1)


def test_an_unclosed_block_of_another_language_is_prose():
    reply = parse_reply("A.\n```python\nprint(1)\n```\nOutput:\n```text\nacc 0.9\n")
    assert (reply.outcome, reply.code) == ("ok", "print(1)\n")


def test_a_leading_byte_order_mark_is_dropped():
    reply = parse_reply("\ufeff```python\nprint(1)\n```\n")
    assert (reply.outcome, reply.code) == ("ok", "print(1)\n")


@pytest.mark.parametrize("eol", ["\r", "\r\n"])
def test_cr_and_crlf_end_lines(eol):
    reply = parse_reply(eol.join(["Analysis.", "```python", "x = 1", "print(x)", "```", ""]))
    assert (reply.outcome, reply.code, reply.analysis) == ("ok", "x = 1\nprint(x)\n", "Analysis.")


# Property: any program, rendered into any well-formed reply, comes back exactly.

PROGRAM_LINE = st.text(alphabet=string.ascii_letters + string.digits + " ()[]{}:=+-*/'\".,#`~_\\", max_size=30)


@st.composite
def program(draw) -> str:
    lines = draw(st.lists(PROGRAM_LINE, min_size=1, max_size=8))
    lines = [line.rstrip() for line in lines]
    lines[-1] = lines[-1] or "pass"
    if not lines[-1].strip():
        lines[-1] = "pass"
    return "\n".join(lines) + "\n"


PROSE = st.text(alphabet=string.ascii_letters + " .,:;()", max_size=40).map(str.strip)


@st.composite
def reply_of(draw, code: str) -> str:
    char = draw(st.sampled_from("`~"))
    longest = max((len(run) for run in re.findall(rf"{re.escape(char)}+", code)), default=0)
    fence = char * max(3, longest + 1, draw(st.integers(3, 5)))
    info = draw(st.sampled_from(["python", "py", "python3", "", "Python", "python {.numberLines}"]))
    closing = fence + char * draw(st.integers(0, 2)) + " " * draw(st.integers(0, 2))
    where = draw(st.sampled_from(["top", "indented", "list", "bullet", "quote"]))
    indent = {"top": "", "indented": " " * draw(st.integers(1, 3)), "list": "   ", "bullet": "  ", "quote": "> "}[where]
    # Blank code lines carry the container's prefix (a quote's ">") but no other indentation.
    body = [indent + line if line or where == "quote" else line for line in code.rstrip("\n").split("\n")]
    if where == "quote":
        body = [line if line.startswith(">") else "> " + line for line in body]
    block = [f"{indent}{fence}{info}", *body, f"{indent}{closing}"]
    lead = {"list": "1. Steps:\n\n", "bullet": "- Steps:\n\n"}.get(where, "")
    before, after = draw(PROSE), draw(PROSE)
    text = "\n".join([before, "", lead + "\n".join(block), "", after]) + "\n"
    eol = draw(st.sampled_from(["\n", "\r\n", "\r"]))
    return draw(st.sampled_from(["", "\ufeff"])) + text.replace("\n", eol)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_any_program_in_any_well_formed_reply_comes_back_exactly(data):
    code = data.draw(program())
    reply = parse_reply(data.draw(reply_of(code)))
    assert (reply.outcome, reply.code) == ("ok", code)
