"""Reply parsing: analysis + exactly one fenced Python block; every other shape has a defined outcome."""

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
