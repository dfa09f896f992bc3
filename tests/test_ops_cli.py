"""Every failing CLI path ends in one line on stderr and exit code 2; --debug adds the traceback;
``| head -1`` ends quietly; ``wmrl launch`` refuses a bad run root, trainer or task pool before it
creates anything."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def wmrl(*args: str, cwd: Path | None = None, debug: bool = False) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("WMRL_DEBUG", None)
    pre = ["--debug"] if debug else []
    return subprocess.run([sys.executable, "-m", "wmrl.cli.main", *pre, *args], check=False, capture_output=True, text=True,
                          cwd=cwd or REPO, env=env, timeout=120)


def one_line_error(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 2, (out.returncode, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    return lines[0]


def test_yaml_whose_top_level_is_a_list_names_the_file(tmp_path):
    bad = tmp_path / "list.yaml"
    bad.write_text("- a\n- b\n")
    line = one_line_error(wmrl("launch", str(bad)))
    assert str(bad) in line and "top level must be a mapping" in line and "got a list" in line


@pytest.mark.parametrize("how", ["yaml", "override"])
def test_a_section_given_a_value_names_the_section(tmp_path, how):
    config = tmp_path / "c.yaml"
    config.write_text("algorithm: 5\n" if how == "yaml" else "run_name: x\n")
    line = one_line_error(wmrl("launch", str(config), *(["algorithm=3"] if how == "override" else [])))
    assert "'algorithm' is a section" in line and "'?'" not in line and "w_max" in line


def test_debug_flag_prints_the_traceback(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("algorithm: 5\n")
    out = wmrl("launch", str(config), debug=True)
    assert out.returncode == 2 and "Traceback" in out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith("wmrl: config error:")


def test_runs_root_that_is_a_file_is_refused_before_anything_is_created(tmp_path):
    blocker = tmp_path / "runs"
    blocker.write_text("not a directory")
    config = tmp_path / "c.yaml"
    config.write_text("run_name: r\n")
    line = one_line_error(wmrl("launch", str(config), f"runs_root={blocker}"))
    assert f"{blocker} is a file" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml", "runs"]


def test_runs_root_under_proc_is_refused(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("run_name: r\n")
    line = one_line_error(wmrl("launch", str(config), "runs_root=/proc/self/wmrl"))
    assert "runs_root='/proc/self/wmrl' is under /proc" in line


def test_bad_tasks_root_is_refused_before_the_run_directory_exists(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("run_name: r\n")
    line = one_line_error(wmrl("launch", str(config), f"runs_root={tmp_path}/runs",
                               f"tasks.root={tmp_path}/no-such-pool", "launch.executor=slurm"))
    assert "tasks.root=" in line and "task pool not found" in line
    assert not (tmp_path / "runs").exists()


def test_unknown_builtin_task_is_one_line_naming_families_and_ids(tmp_path):
    line = one_line_error(wmrl("tasks", "build", "--root", str(tmp_path / "pool"), "--only", "bogus"))
    assert "bogus" in line and "wine (wine-cultivar)" in line
    assert not (tmp_path / "pool").exists()


def test_output_cut_short_by_the_reader_ends_without_a_traceback(tmp_path):
    from wmrl.tasks.testing import make_wmrl_task

    task = make_wmrl_task(tmp_path)
    code = (f"{sys.executable} -m wmrl.cli.main tasks show {task} | head -1")
    out = subprocess.run(["bash", "-o", "pipefail", "-c", code], check=False, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert out.stdout.startswith("task:") and len(out.stdout.splitlines()) == 1
    assert "Traceback" not in out.stderr and "BrokenPipe" not in out.stderr, out.stderr
