"""Crash-safe file primitives: what a reader on shared storage may and may not see."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from wmrl.io import (
    TMP_PREFIX,
    append_line_durable,
    atomic_create_json,
    atomic_write_json,
    read_json,
)


def test_atomic_write_replaces_whole_file_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    atomic_write_json(target, {"step": 1})
    atomic_write_json(target, {"step": 2})
    assert read_json(target) == {"step": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_failed_write_keeps_the_old_file_and_removes_its_temp(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    atomic_write_json(target, {"step": 1})
    with pytest.raises(ValueError):
        atomic_write_json(target, {"score": float("nan")})  # NaN is refused before anything is renamed
    assert read_json(target) == {"step": 1}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(TMP_PREFIX)]


def test_create_only_the_first_writer_wins(tmp_path: Path) -> None:
    target = tmp_path / "results" / "req-1.json"
    assert atomic_create_json(target, {"score": 0.5}) is True
    assert atomic_create_json(target, {"score": 0.9}) is False
    assert read_json(target) == {"score": 0.5}
    assert sorted(os.listdir(target.parent)) == ["req-1.json"]


def test_log_records_must_be_single_lines(tmp_path: Path) -> None:
    log = tmp_path / "pairs.jsonl"
    append_line_durable(log, '{"a": 1}')
    with pytest.raises(ValueError, match="single line"):
        append_line_durable(log, '{"a":\n 2}')
    assert log.read_text() == '{"a": 1}\n'


def test_files_follow_the_umask_so_a_lab_can_share_them(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        atomic_write_json(tmp_path / "shared.json", {"a": 1})
        atomic_create_json(tmp_path / "result.json", {"a": 1})
        os.umask(0o077)
        atomic_write_json(tmp_path / "private.json", {"a": 1})
    finally:
        os.umask(old)
    assert (tmp_path / "shared.json").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "result.json").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "private.json").stat().st_mode & 0o777 == 0o600


def test_a_group_shared_directory_passes_its_group_to_new_files(tmp_path: Path) -> None:
    import grp

    from wmrl.io import share_with_group

    group = grp.getgrgid(os.getgid()).gr_name
    lab = tmp_path / "lab"
    lab.mkdir()
    share_with_group(lab, group)
    assert lab.stat().st_mode & 0o2000
    atomic_write_json(lab / "sub" / "x.json", {})
    assert (lab / "sub" / "x.json").stat().st_gid == os.getgid()
    assert (lab / "sub").stat().st_mode & 0o2000  # new directories inherit the setgid bit


def test_an_unknown_group_is_a_clear_error(tmp_path: Path) -> None:
    from wmrl.io import share_with_group

    with pytest.raises(ValueError, match="group 'no-such-lab-group' does not exist"):
        share_with_group(tmp_path, "no-such-lab-group")
