"""Security: a solution tries to fill the host's disk (many files, a deleted file held open, millions
of entries) or its memory through tmpfs (/tmp, /dev/shm); each is stopped at its quota with a clear
status, and executions beside it on the same machine finish normally (issue 7, item 7).

The issue's attack wrote 160 files of 64 MB (10 GB); here the quota is 64 MB and the attack tries
1.25 GB, so a broken quota fails the test without filling this machine's disk.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import test_security_common
from test_security_common import World, assert_contained, attack, limits, snapshot

from wmrl.config import load_config, to_yaml
from wmrl.execution.outcome import execute_and_grade
from wmrl.execution.worker import Worker
from wmrl.orchestration.anchors import real_work
from wmrl.sandbox import SandboxConfig, make_backend
from wmrl.storage.records import ExecutionRequest
from wmrl.storage.rundir import create_run_dir
from wmrl.storage.spool import Spool

world = test_security_common.world  # the shared fixture

QUOTA_MB = 64
# The watchdog walks every 0.05 s: what a solution writes between two walks, and while the walk and the
# kill run, passes the quota. Writes into the page cache go at GB/s: 65-242 MB past 64 MB measured over 18
# runs on a loaded 2-core machine; half of the 1.25 GB the attack writes still shows it was stopped early.
OVERSHOOT_MB = 640

MANY_FILES = """
block = b"x" * (1 << 20)
for i in range(160):  # 160 files of 8 MB: 1.25 GB, each file far below max_file_mb
    with open(f"part-{i:03d}.bin", "wb") as f:
        for _ in range(8):
            f.write(block)
print("wrote everything")
"""

FILL_TMPFS = """
import time
block = b"x" * (1 << 20)
for d in ("/tmp", "/dev/shm"):
    for i in range(12):  # 12 closed files of 16 MB in each: no process holds these pages
        with open(f"{d}/fill-{i}.bin", "wb") as f:
            for _ in range(16):
                f.write(block)
print("filled")
time.sleep(30)
"""

# An ordinary solution: writes below the quota (work dir and /tmp), then a good submission.
HONEST = """
import csv, time
block = b"z" * (1 << 20)
with open("features.bin", "wb") as f:
    for _ in range(16):
        f.write(block)
with open("/tmp/cache.bin", "wb") as f:
    f.write(block * 16)
time.sleep(2)  # still running while the attacker is stopped
with open(f"{DATA_DIR}/test.csv") as f, open(SUBMISSION_PATH, "w", newline="") as out:
    w = csv.writer(out)
    w.writerow(["id", "label"])
    for row in csv.DictReader(f):
        w.writerow([row["id"], int(float(row["x1"]) > 0)])
print("honest done")
"""


def _work_dir_mb(path: Path) -> float:
    return sum(p.lstat().st_blocks * 512 for p in path.rglob("*")) / 2**20


def test_many_files_in_the_work_dir_stop_at_the_disk_quota(world: World) -> None:
    before = snapshot(world.protected)
    result, grade = attack(world, MANY_FILES, limits(timeout_s=60, disk_quota_mb=QUOTA_MB))
    assert result.status == "disk_quota"
    assert "over its disk quota of 64 MB" in result.extra["limit_detail"]
    assert "wrote everything" not in result.stdout_tail
    assert QUOTA_MB < _work_dir_mb(world.work_dir) < QUOTA_MB + OVERSHOOT_MB
    assert grade.position_score == 0.0
    assert_contained(world, before, result, grade)


def test_filling_tmp_and_dev_shm_is_stopped_at_the_memory_limit(world: World) -> None:
    before = snapshot(world.protected)
    # 384 MB of tmpfs files against 256 MB: no process maps them, so only the tmpfs count sees them.
    result, grade = attack(world, FILL_TMPFS, limits(timeout_s=60, memory_mb=256))
    assert result.status == "memory"
    assert result.wall_seconds < 30
    assert result.extra["tmpfs_peak_mb"] > 256 - 64  # the processes themselves are small
    assert "files in /tmp or /dev/shm" in result.extra["limit_detail"]
    assert_contained(world, before, result, grade)


def test_a_tmpfs_file_the_solution_maps_counts_once(world: World) -> None:
    before = snapshot(world.protected)
    # 160 MB in /dev/shm, mapped and read: counted twice (PSS + tmpfs) it would pass 256 MB.
    code = """
import mmap, os
with open("/dev/shm/shared.bin", "wb") as f:
    for _ in range(160):
        f.write(b"y" * (1 << 20))
with open("/dev/shm/shared.bin", "r+b") as f:
    m = mmap.mmap(f.fileno(), 0)
    total = sum(m[i] for i in range(0, len(m), 4096))
import time; time.sleep(1.5)
print("mapped", total > 0)
"""
    result, grade = attack(world, code, limits(timeout_s=30, memory_mb=256))
    assert result.status == "ok", result.extra
    assert result.stdout_tail == "mapped True\n"
    assert 160 <= result.peak_memory_mb < 256
    assert_contained(world, before, result, grade)


def test_a_deleted_file_held_open_counts_toward_the_quota(world: World) -> None:
    before = snapshot(world.protected)
    code = """
import os, time
block, held = b"x" * (1 << 20), []
for i in range(32):  # 32 files of 32 MB, each under the file-size limit
    f = open(f"hidden-{i}.bin", "wb")
    os.unlink(f"hidden-{i}.bin")  # invisible to a directory walk from now on
    held.append(f)
    for _ in range(32):
        f.write(block)
        f.flush()
print("wrote 1 GB nobody can see")
time.sleep(30)
"""
    result, grade = attack(world, code, limits(timeout_s=60, disk_quota_mb=QUOTA_MB))
    assert result.status == "disk_quota"
    assert "wrote 1 GB" not in result.stdout_tail
    assert result.wall_seconds < 30
    assert_contained(world, before, result, grade)


def test_millions_of_empty_files_stop_at_the_file_count(world: World) -> None:
    before = snapshot(world.protected)
    code = """
import os
os.mkdir("d")
for i in range(1_000_000):
    open(f"d/{i}", "w").close()
"""
    result, grade = attack(world, code, limits(timeout_s=60, max_files=500))
    assert result.status == "disk_quota"
    assert "more than 500 files" in result.extra["limit_detail"]
    assert sum(1 for _ in world.work_dir.rglob("*")) < 100_000
    assert_contained(world, before, result, grade)


def test_the_agent_is_told_which_quota_stopped_it(world: World) -> None:
    backend = make_backend(SandboxConfig(backend="bwrap"))
    outcome = execute_and_grade(
        world.task,
        MANY_FILES,
        backend,
        limits(timeout_s=60, disk_quota_mb=QUOTA_MB),
        world.work_root,
    )
    assert outcome.result.status == "disk_quota"
    assert "Execution was stopped at its disk quota: it wrote" in outcome.feedback
    assert "deleted files still held open included" in outcome.feedback
    assert "No valid submission: the code did not finish successfully (status: disk_quota)" in (
        outcome.feedback
    )
    assert not any(world.work_root.iterdir())  # the 64+ MB were removed with the work dir


def test_a_disk_filler_is_stopped_while_two_executions_beside_it_finish(world: World) -> None:
    """Three executions at once on this machine: the attacker stops at its quota, the others are
    untouched and graded as usual (they also write, below the quota, to their dirs and /tmp)."""
    before = snapshot(world.protected)
    backend = make_backend(SandboxConfig(backend="bwrap"))
    lim = limits(timeout_s=60, disk_quota_mb=QUOTA_MB, memory_mb=512)
    codes = {"attacker": MANY_FILES, "first": HONEST, "second": HONEST}
    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = {
            name: pool.submit(execute_and_grade, world.task, code, backend, lim, world.root / name)
            for name, code in codes.items()
        }
        outcomes = {name: f.result() for name, f in futures.items()}
    assert outcomes["attacker"].result.status == "disk_quota"
    for name in ("first", "second"):
        out = outcomes[name]
        assert out.result.status == "ok", (name, out.result.extra, out.result.stderr_tail)
        assert out.result.stdout_tail == "honest done\n"
        assert out.grade.valid and 0.0 < out.grade.position_score <= 1.0
        assert out.result.extra["disk_peak_mb"] < QUOTA_MB
    assert snapshot(world.protected) == before


def test_a_worker_publishes_the_quota_status_and_goes_on_with_the_next_request(
    world: World,
) -> None:
    """The production path: a worker claims from the spool, runs ``real_work`` (sandbox + grader)
    and publishes; the attacker's record says ``disk_quota``, the worker lives on."""
    scratch = world.root / "scratch"
    scratch.mkdir()
    cfg = load_config(None, [
        "run_name=quota", f"tasks.root={world.root / 'tasks'}", f"sandbox.scratch_dir={scratch}",
        f"sandbox.disk_quota_mb={QUOTA_MB}", "sandbox.timeout_s=60", "sandbox.memory_mb=1024",
        "launch.timing.lease_s=30", "launch.timing.heartbeat_s=0.2", "launch.timing.poll_min_s=0.02",
        "launch.timing.poll_max_s=0.2",
    ])  # fmt: skip
    run = create_run_dir(world.root / "run", to_yaml(cfg))
    spool = Spool(run, cfg.launch.max_attempts, cfg.launch.timing.tmp_max_age_s)
    requests = [
        ExecutionRequest.create(run.run_id, 1, "tiny", 0, i, code, timeout_s=60)
        for i, code in enumerate([MANY_FILES, HONEST])
    ]
    for request in requests:
        spool.enqueue(request)
    worker = Worker(run, real_work(run), cfg.launch, worker_id="w1", idle_timeout_s=1.0)
    assert worker.run() == 0
    assert worker.counts["done"] == 2 and worker.counts["errors"] == 0
    attacker, honest = (spool.read_result(r.request_id) for r in requests)
    assert attacker is not None and honest is not None
    assert attacker.status == "done" and attacker.score == 0.0
    assert attacker.outcome["result"]["status"] == "disk_quota"
    assert "stopped at its disk quota" in attacker.outcome["feedback"]
    assert honest.outcome["result"]["status"] == "ok" and honest.score > 0.0
