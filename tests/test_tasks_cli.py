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


def test_list_takes_key_value_overrides_like_every_command(tmp_path, capsys):
    make_wmrl_task(tmp_path, name="a-task")
    assert main(["tasks", "list", f"tasks.root={tmp_path}"]) == 0
    assert "a-task" in capsys.readouterr().out


def test_list_reads_tasks_root_from_config_and_overrides_win(tmp_path, capsys):
    make_wmrl_task(tmp_path / "one", name="from-config")
    make_wmrl_task(tmp_path / "two", name="from-override")
    config = tmp_path / "cfg.yaml"
    config.write_text(f"tasks:\n  root: {tmp_path / 'one'}\n")
    assert main(["tasks", "list", "--config", str(config)]) == 0
    assert "from-config" in capsys.readouterr().out
    assert main(["tasks", "list", "--config", str(config), f"tasks.root={tmp_path / 'two'}"]) == 0
    assert "from-override" in capsys.readouterr().out


def test_a_bad_override_is_a_config_error_naming_the_key(tmp_path, capsys):
    make_wmrl_task(tmp_path)
    assert main(["tasks", "list", f"tasks.root={tmp_path}", "tasks.mledojo_boards=both"]) == 2
    assert "tasks.mledojo_boards" in capsys.readouterr().err


def test_a_broken_competition_is_reported_and_skipped_never_hiding_the_others(tmp_path, capsys):
    make_wmrl_task(tmp_path, name="a-good")
    broken = make_mlebench_task(tmp_path, name="b-broken")
    (broken / "leaderboard.csv").write_text("teamId,score\n1,0.9\n2,abc\n")
    make_wmrl_task(tmp_path, name="c-good")
    assert main(["tasks", "list", f"tasks.root={tmp_path}"]) == 1
    out = capsys.readouterr().out
    assert "a-good" in out and "c-good" in out
    assert "1 task directory" in out and "b-broken:" in out and "line 3: score='abc'" in out


def test_show_takes_overrides_after_the_task(tmp_path, capsys):
    make_wmrl_task(tmp_path)
    assert main(["tasks", "show", "tiny-parity", f"tasks.root={tmp_path}", "--no-overview"]) == 0
    assert "ties within 1e-06" in capsys.readouterr().out
