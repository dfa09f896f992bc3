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
