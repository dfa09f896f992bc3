"""MLE-Dojo competitions as its prepare step lays them out, with real boards (tests/fixtures/mledojo)."""

import shutil

import pandas as pd
import pytest

from wmrl.execution.outcome import format_feedback
from wmrl.grading.grader import grade_submission
from wmrl.sandbox.base import ExecutionResult
from wmrl.tasks.fixtures import MLEDOJO, make_mledojo_competition
from wmrl.tasks.layouts import LoadOptions, load_task
from wmrl.tasks.metric_source import read_metric_source
from wmrl.tasks.task import TaskError
from wmrl.tasks.testing import write_metric_stub

SPOOKY = "spooky-author-identification"


def _submit(tmp_path, task, values):
    answers = task.answers()
    frame = answers[[task.id_column]].copy()
    for column, column_values in zip(task.target_columns, values, strict=True):
        frame[column] = column_values
    path = tmp_path / "submission.csv"
    frame.to_csv(path, index=False)
    return path


def test_prepared_layout_loads_with_both_boards_from_data_private(tmp_path):
    task = load_task(make_mledojo_competition(tmp_path, SPOOKY))
    assert task.leaderboard_path == tmp_path / SPOOKY / "data" / "private" / "private_leaderboard.csv"
    assert task.public_leaderboard_path == tmp_path / SPOOKY / "data" / "private" / "public_leaderboard.csv"
    assert task.description_path.name == "description.txt"
    assert len(task.leaderboard) == 1241 and len(task.public_leaderboard) == 1241


def test_metric_direction_and_columns_come_from_metric_py(tmp_path):
    task = load_task(make_mledojo_competition(tmp_path, SPOOKY))
    assert (task.metric_name, task.direction, task.target_columns) == ("log_loss_raw", "min", ("EAP", "HPL", "MWS"))


def test_metric_py_is_read_not_executed(tmp_path):
    path = tmp_path / "metric.py"
    path.write_text('raise SystemExit("executed")\n\nclass M(CompetitionMetrics):\n'
                    '    def __init__(self, value: str = "a,b", higher_is_better: bool = False):\n        pass\n'
                    '    def evaluate(self, y_true, y_pred):\n        return 0\n')
    source = read_metric_source(path)
    assert (source.class_name, source.higher_is_better, source.value_columns) == ("M", False, ("a", "b"))


def test_fingerprint_ignores_comments_and_layout(tmp_path):
    a = write_metric_stub(tmp_path / "a.py", "C", "y", True)
    b = tmp_path / "b.py"
    b.write_text(a.read_text().replace("raise NotImplementedError", "# a comment\n        raise   NotImplementedError"))
    assert read_metric_source(a).evaluate_fingerprint == read_metric_source(b).evaluate_fingerprint


def test_reward_is_the_mean_of_private_and_public_position_scores(tmp_path):
    task = load_task(make_mledojo_competition(tmp_path, SPOOKY))
    probs = [[0.6 if a else 0.2 for a in task.answers()[c]] for c in task.target_columns]
    grade = grade_submission(task, _submit(tmp_path, task, probs))
    private, public = grade.boards["private"]["position_score"], grade.boards["public"]["position_score"]
    assert private != public
    assert grade.position_score == (private + public) / 2


def test_private_only_is_a_config_switch(tmp_path):
    comp = make_mledojo_competition(tmp_path, SPOOKY)
    task = load_task(comp, LoadOptions(mledojo_boards="private"))
    probs = [[0.6 if a else 0.2 for a in task.answers()[c]] for c in task.target_columns]
    grade = grade_submission(task, _submit(tmp_path, task, probs))
    assert list(grade.boards) == ["private"] and grade.position_score == grade.boards["private"]["position_score"]


def test_probabilities_are_taken_as_given_not_renormalised(tmp_path):
    task = load_task(make_mledojo_competition(tmp_path, SPOOKY))
    truth = task.answers()
    halves = [[0.5 if a else 0.1 for a in truth[c]] for c in task.target_columns]  # rows sum to 0.7
    grade = grade_submission(task, _submit(tmp_path, task, halves))
    assert grade.valid and grade.raw_score == pytest.approx(-__import__("math").log(0.5), abs=1e-12)


def test_a_metric_py_whose_evaluate_differs_from_the_reviewed_one_needs_confirming(tmp_path):
    # The stand-in has the real class name but not the real evaluate(): the registry's mapping is not trusted.
    comp = make_mledojo_competition(tmp_path, SPOOKY)
    (comp / "wmrl_task.yaml").unlink()
    with pytest.raises(TaskError, match=r"utils/metric\.py: SpookyAuthorIdentificationMetrics\.evaluate\(\) differs "
                                        r"from the version wmrl mapped to log_loss_raw.*wmrl_task\.yaml"):
        load_task(comp)


def test_utils_and_info_may_live_in_the_repository_folder(tmp_path):
    comp = make_mledojo_competition(tmp_path / "data", SPOOKY)
    repo = tmp_path / "mledojo" / "competitions" / SPOOKY
    repo.mkdir(parents=True)
    shutil.move(comp / "utils", repo / "utils")
    (repo / "info").mkdir()
    for board in ("private_leaderboard.csv", "public_leaderboard.csv"):
        shutil.move(comp / "data" / "private" / board, repo / "info" / board)
    task = load_task(comp, LoadOptions(competitions_dir=tmp_path / "mledojo" / "competitions"))
    assert task.leaderboard_path == repo / "info" / "private_leaderboard.csv" and task.metric_name == "log_loss_raw"


@pytest.mark.parametrize("comp", sorted(MLEDOJO))
def test_every_fixture_competition_grades_a_perfect_submission_at_the_top(tmp_path, comp):
    task = load_task(make_mledojo_competition(tmp_path, comp))
    truth = task.answers()
    grade = grade_submission(task, _submit(tmp_path, task, [truth[c] for c in task.target_columns]))
    assert grade.valid and grade.position_score == 1.0


# --------------------------------------------------------------------------- broken layouts


def _remove(path):
    shutil.rmtree(path) if path.is_dir() else path.unlink()


@pytest.mark.parametrize(
    "breakage,message",
    [
        (lambda c: _remove(c / "data/private/test_answer.csv"),
         r"missing MLE-Dojo answers file: .*data/private/test_answer\.csv; MLE-Dojo's prepare step writes it"),
        (lambda c: (c / "data/private/private_leaderboard.csv").write_text("rank,score\n"),
         r"private_leaderboard\.csv: column 'score' has no scores \(header only"),
        (lambda c: (c / "data/private/public_leaderboard.csv").write_text("rank,score\n1,0.1\n2,oops\n"),
         r"public_leaderboard\.csv, line 3: score='oops' is not a finite number"),
        (lambda c: _remove(c / "data/private/private_leaderboard.csv"),
         r"missing MLE-Dojo leaderboard: .*data/private/private_leaderboard\.csv.*re-run its prepare step"),
        (lambda c: pd.read_csv(c / "data/private/test_answer.csv").rename(columns={"EAP": "eap"}).to_csv(
            c / "data/private/test_answer.csv", index=False),
         r"test_answer\.csv: answers lack column\(s\) \['EAP'\]"),
        (lambda c: _remove(c / "data/public/sample_submission.csv"),
         r"missing sample submission: .*data/public/sample_submission\.csv; MLE-Dojo's prepare step"),
        (lambda c: _remove(c / "data/public/description.txt"),
         r"missing MLE-Dojo description: .*data/public/description\.txt"),
        (lambda c: (_remove(c / "wmrl_task.yaml"), write_metric_stub(c / "utils/metric.py", "OtherMetrics", "EAP", False)),
         r"utils/metric\.py: unknown metric: class OtherMetrics .*write .*wmrl_task\.yaml with 'metric: NAME'"),
        (lambda c: (_remove(c / "wmrl_task.yaml"), _remove(c / "utils")),
         r"no MLE-Dojo metric definition for spooky-author-identification: looked for utils/metric\.py"),
        (lambda c: (c / "wmrl_task.yaml").write_text("metric: accuracy\n"),
         r"wmrl_task\.yaml: metric accuracy is higher-is-better but the file says direction=min"),
    ],
    ids=["missing-answers", "header-only-board", "malformed-board-row", "missing-board", "renamed-answer-column",
         "missing-sample-submission", "missing-description", "unknown-metric-class", "no-metric-py",
         "direction-contradicts-metric-py"],
)
def test_broken_layout_error_names_the_file_and_what_to_do(tmp_path, breakage, message):
    comp = make_mledojo_competition(tmp_path, SPOOKY)
    breakage(comp)
    with pytest.raises(TaskError, match=message):
        load_task(comp)


def test_feedback_names_the_position_on_both_boards(tmp_path):
    task = load_task(make_mledojo_competition(tmp_path, SPOOKY))
    probs = [[0.6 if a else 0.2 for a in task.answers()[c]] for c in task.target_columns]
    grade = grade_submission(task, _submit(tmp_path, task, probs))
    result = ExecutionResult("ok", 0, 1.0, 1.0, 10.0, "", "", None, str(tmp_path / "submission.csv"))
    text = format_feedback(result, grade)
    private, public = grade.boards["private"], grade.boards["public"]
    assert (f"Position {private['position']} of 1241 on the private leaderboard, Position {public['position']} of "
            f"1241 on the public leaderboard (Position Score {grade.position_score:.3f}, their mean)") in text
