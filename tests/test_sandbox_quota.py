"""The measurements behind the disk quota and the memory watchdog, on real files and processes."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from wmrl.sandbox.disk import DiskWatch, deleted_but_held, tree_usage
from wmrl.sandbox.memory import tmpfs_mounts
from wmrl.world_model.prompts import CHECK_NAMES
from wmrl.world_model_data.targets import failing_check
from wmrl.world_model_data.variants import Outcome

MB = 1 << 20


def _write(path: Path, mb: int) -> Path:
    path.write_bytes(b"x" * (mb * MB))
    return path


def test_files_in_nested_directories_all_count(tmp_path: Path) -> None:
    _write(tmp_path / "a.bin", 2)
    (tmp_path / "d" / "e").mkdir(parents=True)
    _write(tmp_path / "d" / "e" / "b.bin", 3)
    usage = tree_usage([tmp_path], max_bytes=1 << 40, max_files=100)
    assert 5 * MB <= usage.bytes < 5 * MB + 64 * 1024
    assert usage.files == 4  # a.bin, d, d/e, d/e/b.bin


def test_a_hard_linked_file_counts_once(tmp_path: Path) -> None:
    _write(tmp_path / "a.bin", 4)
    for i in range(5):
        os.link(tmp_path / "a.bin", tmp_path / f"link{i}")
    assert tree_usage([tmp_path], 1 << 40, 100).bytes < 5 * MB


def test_a_sparse_file_counts_at_its_apparent_size(tmp_path: Path) -> None:
    with open(tmp_path / "sparse.bin", "wb") as f:
        f.truncate(64 * MB)  # no blocks yet, but writing into it needs no further size change
    assert (tmp_path / "sparse.bin").stat().st_blocks * 512 < MB
    assert tree_usage([tmp_path], 1 << 40, 100).bytes == 64 * MB


def test_symlinks_are_not_followed(tmp_path: Path) -> None:
    outside = _write(tmp_path / "outside.bin", 8)
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "ln").symlink_to(outside)
    assert tree_usage([tmp_path / "work"], 1 << 40, 100).bytes < MB


def test_the_walk_stops_once_past_the_file_count(tmp_path: Path) -> None:
    for i in range(300):
        (tmp_path / str(i)).touch()
    assert tree_usage([tmp_path], 1 << 40, max_files=50).files == 51


def test_a_deleted_file_still_open_is_found_through_proc(tmp_path: Path) -> None:
    dev = tmp_path.stat().st_dev
    with open(tmp_path / "gone.bin", "wb") as f:
        f.write(b"x" * 3 * MB)
        f.flush()
        os.unlink(tmp_path / "gone.bin")
        assert deleted_but_held([os.getpid()], {dev}) >= 3 * MB
        assert deleted_but_held([os.getpid()], {dev + 1}) == 0  # another device: not this quota


def test_the_watch_names_the_quota_it_passed(tmp_path: Path) -> None:
    _write(tmp_path / "a.bin", 3)
    watch = DiskWatch([tmp_path], quota_mb=2, max_files=100)
    assert watch.check() == "it wrote 3 MB, over its disk quota of 2 MB"
    assert DiskWatch([tmp_path], quota_mb=4, max_files=100).check() is None


MOUNTINFO = r"""68 45 0:41 /newroot / rw,nosuid,nodev,relatime - tmpfs tmpfs rw
69 68 254:0 /usr /usr ro,nosuid,nodev,relatime - ext4 /dev/vda rw
90 68 0:45 / /tmp rw,nosuid,nodev,relatime - tmpfs tmpfs rw,size=8388608k
91 82 0:46 / /dev/shm rw,nosuid,nodev,relatime - tmpfs tmpfs rw,size=8388608k
92 68 0:47 / /opt/read\040only ro,relatime - tmpfs tmpfs rw
93 68 0:48 / /my\040scratch rw,relatime master:3 - tmpfs tmpfs rw
"""


def test_writable_tmpfs_mounts_are_read_from_mountinfo() -> None:
    assert tmpfs_mounts(MOUNTINFO) == {
        os.makedev(0, 41): "/",
        os.makedev(0, 45): "/tmp",
        os.makedev(0, 46): "/dev/shm",
        os.makedev(0, 48): "/my scratch",
    }


def test_writing_the_remaining_quota_makes_a_walk_due_at_once(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    watch = DiskWatch([tmp_path / "work"], quota_mb=2, max_files=100)
    me = [os.getpid()]
    watch.due(time.monotonic(), me)  # first sight of this process: its past writes
    assert watch.check(me) is None  # a walk: nothing written since
    watch.next_at = time.monotonic() + 3600  # the next timed walk is far away
    assert not watch.due(time.monotonic(), me)
    _write(tmp_path / "elsewhere.bin", 3)  # 3 MB written: could have filled the 2 MB headroom
    assert watch.due(time.monotonic(), me)


@pytest.mark.parametrize("status", ["timeout", "memory", "disk_quota", "killed"])
def test_a_solution_stopped_at_a_limit_is_a_compute_failure_for_the_world_model(
    status: str,
) -> None:
    """The sandbox's limit statuses reach the world model's training targets as the compute check."""
    outcome = Outcome(status, False, 0.0, None, None, "", "", 1.0, "executed")
    assert failing_check(outcome, CHECK_NAMES) == "compute"
