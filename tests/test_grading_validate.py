"""Validation failures give a reason and position score 0; the grader never raises on a bad file."""

import os

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wmrl.grading.grader import grade_submission
from wmrl.tasks.layouts import load_task
from wmrl.tasks.testing import ANSWERS, TEST_IDS, make_wmrl_task


@pytest.fixture
def task(tmp_path):
    return load_task(make_wmrl_task(tmp_path / "pool"))


def write(tmp_path, text, name="submission.csv"):
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def perfect_csv(ids=TEST_IDS, labels=ANSWERS):
    return "id,y\n" + "".join(f"{i},{y}\n" for i, y in zip(ids, labels))


def test_perfect_submission_ties_the_winner(task, tmp_path):
    grade = grade_submission(task, write(tmp_path, perfect_csv()))
    assert grade.valid and grade.raw_score == 1.0 and grade.position == 1 and grade.position_score == 1.0


def test_rows_may_come_in_any_order_and_ids_as_floats(task, tmp_path):
    rows = list(zip(TEST_IDS, ANSWERS))[::-1]
    text = "y,id\n" + "".join(f"{y},{i}.0\n" for i, y in rows)
    assert grade_submission(task, write(tmp_path, text)).raw_score == 1.0


def test_half_right_submission_gets_its_leaderboard_position(task, tmp_path):
    labels = [1] * len(TEST_IDS)  # right on the even half
    grade = grade_submission(task, write(tmp_path, perfect_csv(labels=labels)))
    assert grade.raw_score == 0.5 and grade.position == 4 and grade.position_score == pytest.approx(2 / 5)


def test_utf8_bom_is_accepted(task, tmp_path):
    assert grade_submission(task, write(tmp_path, b"\xef\xbb\xbf" + perfect_csv().encode())).valid


@pytest.mark.parametrize(
    "content,reason",
    [
        (b"", "empty"),
        (b"id,y\n100,1\x00\n", "NUL"),
        ("id,y\n100,\xe9\n".encode("latin-1"), "not valid UTF-8"),
        ("id,label\n" + "".join(f"{i},1\n" for i in TEST_IDS), "missing column"),
        ("id,y,extra\n" + "".join(f"{i},1,0\n" for i in TEST_IDS), "unexpected column"),
        ("id,y\n100,1\n", "has 1 rows; expected 10"),
        ("id,y\n" + "".join(f"{i},1\n" for i in [100] * 10), "duplicated ids"),
        ("id,y\n" + "".join(f"{i},1\n" for i in range(200, 210)), "not in the test set"),
        ("id,y\n" + "".join(f"{i},\n" for i in TEST_IDS), "missing value"),
        ('id,y\n"100,1\n', "could not be parsed|has 0 rows|rows"),
    ],
)
def test_invalid_submission_reason_and_zero_score(task, tmp_path, content, reason):
    grade = grade_submission(task, write(tmp_path, content))
    assert not grade.valid and grade.position_score == 0.0 and grade.raw_score is None
    assert pytest.importorskip("re").search(reason, grade.reason), grade.reason


def test_missing_file_is_invalid(task, tmp_path):
    grade = grade_submission(task, tmp_path / "nothing.csv")
    assert not grade.valid and "no submission file" in grade.reason


def test_none_path_is_invalid(task):
    assert grade_submission(task, None).reason.startswith("no submission file")


def test_symlink_to_answers_is_refused(task, tmp_path):
    link = tmp_path / "submission.csv"
    os.symlink(task.answers_path, link)
    grade = grade_submission(task, link)
    assert not grade.valid and "symbolic link" in grade.reason


def test_directory_instead_of_file_is_invalid(task, tmp_path):
    (tmp_path / "submission.csv").mkdir()
    assert "not a regular file" in grade_submission(task, tmp_path / "submission.csv").reason


def test_oversize_file_is_rejected_without_parsing(task, tmp_path):
    path = write(tmp_path, perfect_csv() + "#" * 5000)
    grade = grade_submission(task, path, max_bytes=1000)
    assert not grade.valid and "over the 1000-byte limit" in grade.reason


def test_non_numeric_score_column_is_invalid(tmp_path):
    task = load_task(make_wmrl_task(tmp_path / "pool", metric="roc_auc"))
    grade = grade_submission(task, write(tmp_path, "id,y\n" + "".join(f"{i},high\n" for i in TEST_IDS)))
    assert not grade.valid and "must be numeric" in grade.reason


def test_infinite_value_is_invalid(tmp_path):
    task = load_task(make_wmrl_task(tmp_path / "pool", metric="rmse", scores=(0.1, 0.5)))
    grade = grade_submission(task, write(tmp_path, "id,y\n" + "".join(f"{i},inf\n" for i in TEST_IDS)))
    assert not grade.valid and "infinite" in grade.reason


def test_lower_is_better_metric_places_by_direction(tmp_path):
    task = load_task(make_wmrl_task(tmp_path / "pool", metric="mae", scores=(0.1, 0.3, 0.5, 0.9)))
    labels = [y if k < 6 else 1 - y for k, y in enumerate(ANSWERS)]  # 4 of 10 wrong: MAE 0.4
    grade = grade_submission(task, write(tmp_path, perfect_csv(labels=labels)))
    assert grade.raw_score == pytest.approx(0.4) and grade.position == 3 and grade.position_score == pytest.approx(0.5)


def test_undefined_metric_is_a_reason_not_an_exception(tmp_path):
    task = load_task(make_wmrl_task(tmp_path / "pool", metric="roc_auc"))
    pd.DataFrame({"id": TEST_IDS, "y": [1] * 10}).to_csv(task.answers_path, index=False)  # one class only
    grade = grade_submission(task, write(tmp_path, perfect_csv()))
    assert not grade.valid and ("could not be scored" in grade.reason or "not finite" in grade.reason)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=st.one_of(
    st.binary(max_size=400),
    st.text(max_size=400).map(str.encode),
    st.lists(st.tuples(st.sampled_from(["100", "101", "1e3", "", "nan", "x", "-0"]),
                       st.sampled_from(["0", "1", "", "inf", "1.5", "\u00e9", '"'])), max_size=12).map(
        lambda rows: ("id,y\n" + "".join(f"{a},{b}\n" for a, b in rows)).encode()),
))
def test_grader_never_raises_on_arbitrary_bytes(task, tmp_path, payload):
    grade = grade_submission(task, write(tmp_path, payload))
    assert 0.0 <= grade.position_score <= 1.0
    assert grade.valid or (grade.position_score == 0.0 and grade.reason)
