"""Strict-JSON verdicts: recovered from fences and prose, repaired when fixable, a counted fallback otherwise."""

import json

import pytest

from wmrl.world_model.aggregate import aggregate
from wmrl.world_model.verdict import CheckVerdict, parse_verdict

GOOD = {"reason": "x is undefined", "verdict": "fail", "confidence": 0.9, "error_type": "NameError",
        "error_line": 3, "env_feedback": "Traceback ...\nNameError: name 'x' is not defined"}


def parse(text, check="imports", n_lines=10, prior=0.0):
    return parse_verdict(text, check, n_lines, prior)


def test_exact_json_is_ok():
    v = parse(json.dumps(GOOD))
    assert (v.status, v.verdict, v.confidence, v.error_line, v.problems) == ("ok", "fail", 0.9, 3, [])


@pytest.mark.parametrize("text, problem", [
    (f"```json\n{json.dumps(GOOD)}\n```", "fenced"),
    (f"Here is my verdict: {json.dumps(GOOD)} Hope this helps.", "prose_around"),
])
def test_json_inside_fences_or_prose_is_recovered(text, problem):
    v = parse(text)
    assert (v.status, v.verdict, v.error_type, v.problems) == ("repaired", "fail", "NameError", [problem])


def test_prose_quoting_another_dict_first_still_finds_the_verdict():
    v = parse('Config {"lr": 1} then {"verdict": "pass", "confidence": 0.2}')
    assert (v.verdict, v.confidence) == ("pass", 0.2)


@pytest.mark.parametrize("text, problem", [
    ("", "empty"),
    ("   \n", "empty"),
    ("The code looks fine to me.", "no_json_object"),
    ('{"reason": "cut off", "verdict": "fa', "no_json_object"),
    ("[1, 2, 3]", "not_an_object"),
    ('{"reason": "no verdict", "confidence": 0.5}', "no_pass_fail_verdict"),
    ('{"verdict": "maybe", "confidence": 0.5}', "no_pass_fail_verdict"),
])
def test_unusable_answers_fall_back_to_pass_and_say_why(text, problem):
    v = parse(text, prior=0.0)
    assert (v.status, v.verdict, v.confidence) == ("fallback", "pass", 0.0)
    assert problem in v.problems


def test_quality_fallback_uses_the_prior():
    assert parse("garbage", check="quality", prior=0.5).confidence == 0.5


@pytest.mark.parametrize("confidence, expected, problem", [
    (1.7, 1.0, "confidence_out_of_range"),  # clipped
    (-3, 0.0, "confidence_out_of_range"),
    (85, 1.0, "confidence_out_of_range"),
    ("high", 1.0, "confidence_not_a_number"),  # a bare fail is taken at its word
    (float("nan"), 1.0, "confidence_not_a_number"),
])
def test_numbers_out_of_range_are_repaired(confidence, expected, problem):
    v = parse(json.dumps({**GOOD, "confidence": confidence}))
    assert v.status == "repaired" and v.confidence == pytest.approx(expected) and problem in v.problems


def test_error_line_outside_the_code_is_dropped():
    v = parse(json.dumps({**GOOD, "error_line": 99}), n_lines=10)
    assert v.error_line is None and "error_line_out_of_range" in v.problems


def test_wrong_keys_are_reported():
    v = parse(json.dumps({"verdict": "pass", "confidence": 0.5, "score": 3}))
    assert v.status == "repaired"
    assert any(p.startswith("unknown_keys:score") for p in v.problems)
    assert any(p.startswith("missing_keys:") for p in v.problems)


def test_ten_times_too_long_feedback_is_cut():
    v = parse(json.dumps({**GOOD, "env_feedback": "E" * 40000}))
    assert len(v.env_feedback) < 4100 and "env_feedback_too_long" in v.problems


def verdict(check, verdict="pass", confidence=0.0, feedback=""):
    return CheckVerdict(check, verdict, confidence, None, None, feedback, "", "ok")


def test_valid_solution_is_scored_by_the_quality_check():
    pred = aggregate([verdict("imports"), verdict("quality", confidence=0.7, feedback="val acc 0.91")], 60)
    assert pred.predicted_valid and pred.r_hat == pytest.approx(0.7)
    assert "val acc 0.91" in pred.feedback and "Position 19 of 60" in pred.feedback


def test_a_failure_caps_the_score_and_the_most_confident_failure_is_shown():
    pred = aggregate([verdict("imports", "fail", 0.6, "NameError: a"), verdict("files_columns", "fail", 0.95,
                      "KeyError: 'b'"), verdict("quality", confidence=0.8)], 60)
    assert not pred.predicted_valid and pred.deciding == "files_columns"
    assert pred.r_hat == pytest.approx(0.05) and "KeyError: 'b'" in pred.feedback and "Position Score 0" in pred.feedback


def test_an_unsure_failure_caps_a_little_and_does_not_flip_validity():
    pred = aggregate([verdict("runtime", "fail", 0.3), verdict("quality", confidence=0.9)], 60)
    assert pred.predicted_valid and pred.r_hat == pytest.approx(0.7)


@pytest.mark.parametrize("raw", ["Infinity", "-Infinity", "1e400", "NaN", "2.5", "true", "[3]", '{"l": 3}', '"x"'])
def test_an_error_line_that_is_not_an_integer_is_dropped_and_counted(raw):
    text = json.dumps({**GOOD, "error_line": None}).replace('"error_line": null', f'"error_line": {raw}')
    v = parse(text)
    assert (v.status, v.verdict, v.error_line) == ("repaired", "fail", None)
    assert "error_line_not_an_int" in v.problems


@pytest.mark.parametrize("raw, line", [("3.0", 3), ('"4"', 4), ("7", 7)])
def test_an_integral_error_line_in_another_spelling_is_read(raw, line):
    v = parse(json.dumps({**GOOD, "error_line": None}).replace('"error_line": null', f'"error_line": {raw}'))
    assert v.error_line == line


@pytest.mark.parametrize("value", [["a", "list"], 42, 2.5, {"parts": 1}, b"bytes"])
def test_an_answer_that_is_not_text_is_a_fallback(value):
    v = parse(value, prior=0.25)
    assert (v.status, v.verdict, v.confidence) == ("fallback", "pass", 0.25)
    assert v.problems[0].startswith("not_text:")


def test_json_nested_deeper_than_the_stack_is_a_fallback_not_a_recursion_error():
    v = parse('{"verdict": "fail", "reason": ' + "[" * 200_000 + "]" * 200_000 + "}")
    assert v.status == "fallback"


def test_a_confidence_beyond_float_range_is_not_a_number():
    v = parse(json.dumps({**GOOD, "confidence": 0}).replace('"confidence": 0', '"confidence": ' + "9" * 400))
    assert (v.status, v.confidence) == ("repaired", 1.0) and "confidence_not_a_number" in v.problems
