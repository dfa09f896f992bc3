"""Loaders of the three layouts, and the error each malformed task directory gets."""

import json
import shutil

import pandas as pd
import pytest

from wmrl.grading.grader import grade_submission
from wmrl.tasks.layouts import LoadOptions, load_task
from wmrl.tasks.pool import find_task, load_pool
from wmrl.tasks.task import TaskError
from wmrl.tasks.testing import (
    ANSWERS,
    TEST_IDS,
    make_mlebench_task,
    make_mledojo_task,
    make_wmrl_task,
)


def perfect(tmp_path):
    path = tmp_path / "sub.csv"
    pd.DataFrame({"id": TEST_IDS, "y": ANSWERS}).to_csv(path, index=False)
    return path


def test_wmrl_layout_loads_and_grades(tmp_path):
    task = load_task(make_wmrl_task(tmp_path))
    assert (task.layout, task.metric_name, task.direction, task.id_column, task.target_columns) == (
        "wmrl", "accuracy", "max", "id", ("y",))
    assert grade_submission(task, perfect(tmp_path)).position_score == 1.0


def test_mlebench_layout_loads_grader_metric_and_answers(tmp_path):
    task = load_task(make_mlebench_task(tmp_path, grader="auc-roc"))
    assert task.layout == "mlebench" and task.metric_name == "roc_auc"
    assert task.answers_path == tmp_path / "tiny-parity" / "prepared" / "private" / "test.csv"
    assert task.public_dir == tmp_path / "tiny-parity" / "prepared" / "public"
    assert len(task.leaderboard) == 5


def test_mlebench_config_may_live_in_a_separate_competitions_dir(tmp_path):
    comp = make_mlebench_task(tmp_path / "data")
    registry = tmp_path / "registry" / comp.name
    registry.mkdir(parents=True)
    for name in ("config.yaml", "leaderboard.csv"):
        shutil.move(comp / name, registry / name)
    task = load_task(comp, LoadOptions(competitions_dir=tmp_path / "registry"))
    assert task.metric_name == "accuracy" and len(task.leaderboard) == 5


def test_mledojo_layout_takes_direction_from_metric_py_and_metric_from_the_confirmation(tmp_path):
    task = load_task(make_mledojo_task(tmp_path, scores=(0.1, 0.2, 0.4), metric="rmse", higher_is_better=False))
    assert task.layout == "mledojo" and task.metric_name == "rmse" and task.direction == "min"
    assert task.answers_path.name == "test_answer.csv"


def test_mledojo_override_file_sets_split(tmp_path):
    comp = make_mledojo_task(tmp_path)
    (comp / "wmrl_task.yaml").write_text("metric: accuracy\nsplit: heldout\n")
    task = load_task(comp)
    assert (task.metric_name, task.direction, task.split) == ("accuracy", "max", "heldout")


def test_mledojo_metric_is_never_guessed_from_the_description(tmp_path):
    comp = make_mledojo_task(tmp_path, metric=None)
    (comp / "data" / "public" / "description.txt").write_text("## Evaluation\nSubmissions are scored by accuracy.\n")
    with pytest.raises(TaskError, match=r"utils/metric\.py: unknown metric: class TinyParityMetrics"):
        load_task(comp)


def test_pool_mixes_layouts_and_filters_by_split(tmp_path):
    make_wmrl_task(tmp_path, name="a-train")
    make_wmrl_task(tmp_path, name="b-heldout", split="heldout")
    make_mlebench_task(tmp_path, name="c-mlebench")
    (tmp_path / "not-a-task").mkdir()
    assert [t.task_id for t in load_pool(tmp_path)] == ["a-train", "b-heldout", "c-mlebench"]
    assert [t.task_id for t in load_pool(tmp_path, split="heldout")] == ["b-heldout"]
    assert find_task(tmp_path, "c-mlebench").layout == "mlebench"


def test_private_side_is_outside_public_dir(tmp_path):
    for make in (make_wmrl_task, make_mlebench_task, make_mledojo_task):
        task = load_task(make(tmp_path / make.__name__))
        assert not task.answers_path.resolve().is_relative_to(task.public_dir.resolve())
        assert not task.leaderboard_path.resolve().is_relative_to(task.public_dir.resolve())


# --------------------------------------------------------------------------- malformed tasks


def _break(task_dir, relative, content=None):
    path = task_dir / relative
    if content is None:
        path.unlink() if path.is_file() else shutil.rmtree(path)
    else:
        path.write_text(content)
    return path


@pytest.mark.parametrize(
    "relative,content,message",
    [
        ("task.json", "{not json", r"task\.json: malformed file"),
        ("task.json", json.dumps({"name": "x"}), r"task\.json: missing key 'metric'"),
        ("task.json", json.dumps({"metric": "bleu"}), r"task\.json: unknown metric 'bleu'"),
        ("task.json", json.dumps({"metric": "accuracy", "direction": "up"}), r"direction='up'"),
        ("task.json", json.dumps({"metric": "accuracy", "split": "dev"}), r"split='dev'"),
        ("public/description.md", None, r"missing description: .*description\.md"),
        ("public/sample_submission.csv", None, r"missing sample submission: .*sample_submission\.csv"),
        ("public/sample_submission.csv", "id\n1\n", r"sample_submission\.csv: sample submission needs an id"),
        ("private/answers.csv", None, r"missing answers file: .*answers\.csv"),
        ("private/answers.csv", "id,z\n100,1\n", r"answers\.csv: answers lack column\(s\) \['y'\]"),
        ("private/leaderboard.csv", None, r"leaderboard file not found: .*leaderboard\.csv"),
        ("private/leaderboard.csv", "rank,points\n1,2\n", r"leaderboard\.csv: no 'score' column"),
        ("private/leaderboard.csv", "rank,score\n1,abc\n", r"leaderboard\.csv, line 2: score='abc' is not a finite"),
        ("private", None, r"missing private directory"),
        ("public", None, r"missing public directory"),
    ],
)
def test_broken_wmrl_task_error_names_the_file(tmp_path, relative, content, message):
    task_dir = make_wmrl_task(tmp_path)
    _break(task_dir, relative, content)
    with pytest.raises(TaskError, match=message):
        load_task(task_dir)


@pytest.mark.parametrize(
    "relative,content,message",
    [
        ("config.yaml", None, r"missing MLE-bench config\.yaml"),
        ("config.yaml", "id: x\n", r"config\.yaml: missing 'grader\.name'"),
        ("config.yaml", "grader: [1, 2\n", r"config\.yaml: malformed file"),
        ("config.yaml", "grader:\n  name: bleu\n", r"config\.yaml: unknown metric: grader\.name='bleu'"),
        ("config.yaml", "grader:\n  name: accuracy\ndataset:\n  answers: x/y.csv\n", r"dataset\.answers='x/y\.csv'"),
        ("leaderboard.csv", None, r"missing MLE-bench leaderboard\.csv"),
        ("prepared/private", None, r"missing MLE-bench private directory"),
    ],
)
def test_broken_mlebench_task_error_names_the_file(tmp_path, relative, content, message):
    task_dir = make_mlebench_task(tmp_path)
    _break(task_dir, relative, content)
    with pytest.raises(TaskError, match=message):
        load_task(task_dir)


@pytest.mark.parametrize(
    "relative,content,message",
    [
        ("data/private/test_answer.csv", None, r"missing MLE-Dojo answers file: .*test_answer\.csv"),
        ("data/private/private_leaderboard.csv", None, r"missing MLE-Dojo leaderboard"),
        ("data/private", None, r"missing MLE-Dojo private directory"),
    ],
)
def test_broken_mledojo_task_error_names_the_file(tmp_path, relative, content, message):
    task_dir = make_mledojo_task(tmp_path)
    _break(task_dir, relative, content)
    with pytest.raises(TaskError, match=message):
        load_task(task_dir)


def test_directory_of_no_known_layout_is_an_error(tmp_path):
    with pytest.raises(TaskError, match="not a task directory"):
        load_task(tmp_path)


def test_empty_pool_is_an_error(tmp_path):
    with pytest.raises(TaskError, match="holds no task directories"):
        load_pool(tmp_path)
