"""MLE-bench competitions as its prepare step lays them out; config and board in its competitions folder."""

import shutil

import numpy as np
import pytest

from wmrl.cli.main import main
from wmrl.grading.grader import grade_submission
from wmrl.tasks.fixtures import FIXTURES, make_mlebench_competition
from wmrl.tasks.layouts import LoadOptions, load_task
from wmrl.tasks.registry import registry
from wmrl.tasks.task import TaskError

SPOOKY = "spooky-author-identification"


@pytest.fixture
def spooky(tmp_path):
    comp = make_mlebench_competition(tmp_path / "data", SPOOKY)
    return load_task(comp, LoadOptions(competitions_dir=FIXTURES / "mlebench"))


def _submit(tmp_path, task, probs):
    frame = task.answers()[[task.id_column]].copy()
    for j, column in enumerate(task.target_columns):
        frame[column] = probs[:, j]
    path = tmp_path / "submission.csv"
    frame.to_csv(path, index=False)
    return path


def _confident(task, p_true):
    truth = task.answers()[list(task.target_columns)].to_numpy(float)
    return np.where(truth == 1, p_true, (1 - p_true) / 2)


def test_competitions_dir_supplies_config_and_board(spooky):
    assert (spooky.metric_name, spooky.direction, len(spooky.leaderboard)) == ("log_loss_sklearn", "min", 1241)
    assert spooky.rules.round_digits == 5 and spooky.rules.medals


def test_without_competitions_dir_the_error_says_where_it_looked_and_what_to_set(tmp_path):
    comp = make_mlebench_competition(tmp_path / "data", SPOOKY)
    with pytest.raises(TaskError, match=r"missing MLE-bench config\.yaml: looked in .*set tasks\.competitions_dir"):
        load_task(comp)


def test_score_is_rounded_to_five_decimals(tmp_path, spooky):
    grade = grade_submission(spooky, _submit(tmp_path, spooky, _confident(spooky, 0.7)))
    assert grade.valid and grade.raw_score == round(grade.raw_score, 5)
    assert grade.raw_score == pytest.approx(-np.log(0.7), abs=5e-6)


def test_rows_that_do_not_sum_to_one_are_invalid(tmp_path, spooky):
    probs = _confident(spooky, 0.7)
    probs[3] *= 0.9
    grade = grade_submission(spooky, _submit(tmp_path, spooky, probs))
    assert not grade.valid and "row 4 sums to 0.9" in grade.reason and grade.position_score == 0.0


def test_medal_and_above_median_flags_follow_the_boards_thresholds(tmp_path, spooky):
    # 1241 teams: gold at position 10 + int(1241 * 0.002) = 12, silver at 62, bronze at 124.
    board = spooky.leaderboard.file_scores
    gold = grade_submission(spooky, _submit(tmp_path, spooky, _confident(spooky, np.exp(-board[11] * 0.99))))
    assert gold.medal == "gold" and gold.above_median
    bronze_only = grade_submission(spooky, _submit(tmp_path, spooky, _confident(spooky, np.exp(-board[100]))))
    assert bronze_only.medal == "bronze" and bronze_only.above_median
    weak = grade_submission(spooky, _submit(tmp_path, spooky, _confident(spooky, 1 / 3)))
    assert weak.medal == "" and weak.above_median is False


def test_invalid_submission_has_no_medal(tmp_path, spooky):
    grade = grade_submission(spooky, tmp_path / "missing.csv")
    assert grade.medal == "" and grade.above_median is False


def test_lfs_pointer_board_gets_its_own_error(tmp_path):
    comp = make_mlebench_competition(tmp_path / "data", SPOOKY)
    repo = tmp_path / "competitions" / SPOOKY
    shutil.copytree(FIXTURES / "mlebench" / SPOOKY, repo)
    (repo / "leaderboard.csv").write_text("version https://git-lfs.github.com/spec/v1\n"
                                          "oid sha256:1087afc671c8eddcca7f8dc792a4d55877213ce86ac9d1f8c7b280edd0eb2514\n"
                                          "size 67155\n")
    with pytest.raises(TaskError, match=r"leaderboard\.csv: is a Git LFS pointer.*git lfs pull"):
        load_task(comp, LoadOptions(competitions_dir=tmp_path / "competitions"))


def test_a_competition_wmrl_cannot_grade_is_refused_with_the_reason(tmp_path):
    comp = make_mlebench_competition(tmp_path / "data", SPOOKY)
    repo = tmp_path / "competitions" / "stanford-covid-vaccine"
    repo.mkdir(parents=True)
    (repo / "config.yaml").write_text("id: stanford-covid-vaccine\ngrader:\n  name: multi-class-log-loss\n")
    comp = comp.rename(comp.parent / "stanford-covid-vaccine")
    with pytest.raises(TaskError, match=r"config\.yaml: unknown metric: wmrl cannot grade stanford-covid-vaccine "
                                        r"\(config says multi-class-log-loss but grade\.py computes"):
        load_task(comp, LoadOptions(competitions_dir=tmp_path / "competitions"))


def test_every_mlebench_competition_is_mapped_or_refused_with_a_reason():
    entries = registry("mlebench")
    assert len(entries) == 82
    assert all(("metric" in e) != ("unsupported" in e) for e in entries.values())


def test_tasks_list_and_exec_honour_competitions_dir(tmp_path, capsys):
    make_mlebench_competition(tmp_path / "data", SPOOKY)
    overrides = [f"tasks.root={tmp_path / 'data'}", f"tasks.competitions_dir={FIXTURES / 'mlebench'}"]
    assert main(["tasks", "list", *overrides]) == 0
    assert "log_loss_sklearn" in capsys.readouterr().out
    solution = tmp_path / "solution.py"
    solution.write_text("import os, shutil\nshutil.copy(os.path.join(os.environ['DATA_DIR'], 'sample_submission.csv'),"
                        " os.environ['SUBMISSION_PATH'])\n")
    assert main(["exec", SPOOKY, str(solution), *overrides, "--backend", "subprocess"]) == 0
    assert "Valid submission" in capsys.readouterr().out


def test_launch_preflight_loads_the_pool_with_competitions_dir(tmp_path):
    from wmrl.config import load_config
    from wmrl.slurm.preflight import PreflightError, check_tasks_root

    make_mlebench_competition(tmp_path / "data", SPOOKY)
    root = f"tasks.root={tmp_path / 'data'}"
    check_tasks_root(load_config(None, [root, f"tasks.competitions_dir={FIXTURES / 'mlebench'}"]))
    with pytest.raises(PreflightError, match=r"missing MLE-bench config\.yaml"):
        check_tasks_root(load_config(None, [root]))
