"""execute_and_grade with the real bwrap sandbox: grading outside, the agent's feedback, the CLI."""

import json
import os

import pytest

from wmrl.cli.main import main
from wmrl.evaluation import TaskScore, aggregate, invalid_reason, kept_valid
from wmrl.execution.executed import to_feedback
from wmrl.execution.outcome import ExecutionOutcome, execute_and_grade
from wmrl.rollout import Trajectory, Turn
from wmrl.sandbox import SandboxConfig, limits_from_config, make_backend
from wmrl.storage.records import ExecutionOutcomeRecord
from wmrl.tasks.layouts import load_task
from wmrl.tasks.testing import make_wmrl_task

GOOD = '''import os, pandas as pd
test = pd.read_csv(os.path.join(DATA_DIR, "test.csv"))
print("predicting", len(test), "rows")
pd.DataFrame({"id": test["id"], "y": (test["id"] % 2 == 0).astype(int)}).to_csv(SUBMISSION_PATH, index=False)
'''
HALF = GOOD.replace('(test["id"] % 2 == 0).astype(int)', "1")


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    return load_task(make_wmrl_task(tmp_path_factory.mktemp("pool")))


@pytest.fixture(scope="module")
def backend():
    return make_backend(SandboxConfig(backend="bwrap"))


def run(task, backend, code, tmp_path, timeout=60.0, **kw):
    limits = limits_from_config(SandboxConfig(backend="bwrap"), timeout_s=timeout)
    return execute_and_grade(task, code, backend, limits, tmp_path / "work", **kw)


def test_valid_solution_gets_position_and_raw_score(task, backend, tmp_path):
    outcome = run(task, backend, GOOD, tmp_path)
    assert outcome.result.status == "ok" and outcome.grade.valid and outcome.grade.position_score == 1.0
    assert "predicting 10 rows" in outcome.feedback
    assert "Position 1 of 5" in outcome.feedback and "Raw Score: 1" in outcome.feedback


def test_weaker_solution_ranks_lower(task, backend, tmp_path):
    outcome = run(task, backend, HALF, tmp_path)
    assert outcome.grade.raw_score == 0.5 and outcome.grade.position_score == pytest.approx(0.4)


def test_crash_feedback_carries_the_full_traceback_and_scores_zero(task, backend, tmp_path):
    code = GOOD + "\nprint('about to fail')\nresult = 1 / 0\n"
    outcome = run(task, backend, code, tmp_path)
    assert outcome.result.status == "error" and outcome.grade.position_score == 0.0
    assert "ZeroDivisionError" in outcome.feedback and "Traceback" in outcome.feedback
    assert "about to fail" in outcome.feedback and "did not finish successfully" in outcome.feedback


def test_invalid_submission_feedback_gives_the_reason(task, backend, tmp_path):
    code = GOOD.replace('"y":', '"label":')
    outcome = run(task, backend, code, tmp_path)
    assert outcome.result.status == "ok" and not outcome.grade.valid
    assert "No valid submission: submission is missing column(s) ['y']" in outcome.feedback


def test_an_evaluation_counts_why_kept_submissions_were_not_valid(task, backend, tmp_path):
    codes = [GOOD + "\nresult = 1 / 0\n", GOOD.replace('"y":', '"label":'), GOOD, "print('forgot')\n",
             GOOD.replace('"test.csv"', '"tst.csv"')]
    trajectories = []
    for i, code in enumerate(codes):  # really executed, then the worker's record as the trainer reads it
        outcome = run(task, backend, code, tmp_path)
        record = ExecutionOutcomeRecord(f"r{i}", "run", "done", outcome.grade.position_score, outcome.to_dict(),
                                        "worker", 1, 0.0, 0.0, outcome.exec_seconds)
        feedback = to_feedback(f"0/0/{i}/0", record)
        trajectories.append(Trajectory(task.task_id, 0, i, "executed", [Turn([], [], [], "", code, None, feedback)],
                                       score=feedback.score, kept_turn=0, final_code=code))
    trajectories.append(Trajectory(task.task_id, 0, 5, "executed", [], score=0.0, kept_turn=None))
    reasons = [invalid_reason(t) for t in trajectories if not kept_valid(t)]
    missing = "grader: no submission file was written at SUBMISSION_PATH"
    assert reasons == ["ZeroDivisionError", "grader: submission is missing column", missing, "FileNotFoundError",
                       "no code"]
    report = aggregate([TaskScore(task.task_id, "tabular", [t.score for t in trajectories])], 6,
                       [kept_valid(t) for t in trajectories], invalid=reasons + ["ZeroDivisionError"])
    assert next(iter(report.invalid.items())) == ("ZeroDivisionError", 2)  # commonest first
    assert report.valid_rate == pytest.approx(1 / 6)
    assert report.table().endswith("Not valid: ZeroDivisionError (2), grader: submission is missing column (1), "
                                   f"{missing} (1), FileNotFoundError (1), no code (1)")


def test_missing_submission_scores_zero(task, backend, tmp_path):
    outcome = run(task, backend, "print('forgot to write')\n", tmp_path)
    assert outcome.grade.position_score == 0.0 and "no submission file" in outcome.feedback


def test_timeout_is_reported_and_scores_zero(task, backend, tmp_path):
    outcome = run(task, backend, GOOD + "\nimport time\ntime.sleep(60)\n", tmp_path, timeout=3.0)
    assert outcome.result.status == "timeout" and outcome.grade.position_score == 0.0
    assert "exceeded the time limit of 3 s" in outcome.feedback


def test_submission_symlinked_to_answers_is_not_graded(task, backend, tmp_path):
    code = f"import os\nos.symlink({str(task.answers_path)!r}, SUBMISSION_PATH)\n"
    outcome = run(task, backend, code, tmp_path)
    assert outcome.grade.position_score == 0.0 and not outcome.grade.valid


def test_work_dir_is_removed_unless_kept(task, backend, tmp_path):
    run(task, backend, GOOD, tmp_path)
    assert os.listdir(tmp_path / "work") == []
    run(task, backend, GOOD, tmp_path, keep_work_dir=True)
    assert len(os.listdir(tmp_path / "work")) == 1


def test_outcome_round_trips_through_json(task, backend, tmp_path):
    outcome = run(task, backend, GOOD, tmp_path)
    again = ExecutionOutcome.from_dict(json.loads(json.dumps(outcome.to_dict())))
    assert again == outcome


def test_timing_is_accounted(task, backend, tmp_path):
    outcome = run(task, backend, GOOD, tmp_path)
    assert 0 < outcome.grade_seconds < outcome.total_seconds and outcome.exec_seconds > 0


def test_cli_exec_prints_feedback_and_exits_zero(task, tmp_path, capsys):
    solution = tmp_path / "solution.py"
    solution.write_text(GOOD)
    assert main(["exec", str(task.root), str(solution)]) == 0
    assert "Position 1 of 5" in capsys.readouterr().out


def test_cli_exec_exit_code_one_for_invalid_submission(task, tmp_path, capsys):
    solution = tmp_path / "solution.py"
    solution.write_text("print('nothing')\n")
    assert main(["exec", str(task.root), str(solution)]) == 1
    assert "No valid submission" in capsys.readouterr().out


def test_cli_exec_unknown_task_names_the_pool(task, tmp_path, capsys):
    solution = tmp_path / "solution.py"
    solution.write_text(GOOD)
    assert main(["exec", "nope", str(solution), "--root", str(task.root.parent)]) == 2
    assert "no task 'nope'" in capsys.readouterr().err
