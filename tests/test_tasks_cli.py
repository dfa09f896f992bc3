"""`wmrl tasks list|show` on a real pool directory."""

from wmrl.cli.main import main
from wmrl.tasks.testing import make_mlebench_task, make_wmrl_task


def test_list_shows_every_task_with_metric_and_split(tmp_path, capsys):
    make_wmrl_task(tmp_path, name="a-task")
    make_mlebench_task(tmp_path, name="b-task")
    assert main(["tasks", "list", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "a-task" in out and "b-task" in out and "accuracy" in out


def test_list_filters_by_split(tmp_path, capsys):
    make_wmrl_task(tmp_path, name="a-task")
    make_wmrl_task(tmp_path, name="h-task", split="heldout")
    main(["tasks", "list", "--root", str(tmp_path), "--split", "heldout"])
    out = capsys.readouterr().out
    assert "h-task" in out and "a-task" not in out


def test_show_prints_metadata_and_the_agents_overview(tmp_path, capsys):
    make_wmrl_task(tmp_path)
    assert main(["tasks", "show", "tiny-parity", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "metric:      accuracy (higher is better)" in out and "leaderboard: 5 entries" in out
    assert "=== SUBMISSION CONTRACT ===" in out


def test_show_unknown_task_exits_two_naming_the_pool(tmp_path, capsys):
    make_wmrl_task(tmp_path)
    assert main(["tasks", "show", "nope", "--root", str(tmp_path)]) == 2
    assert "no task 'nope'" in capsys.readouterr().err
