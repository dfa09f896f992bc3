"""Security: hostile solutions try to exhaust the host (processes, memory, time, output, one huge
file), or to outlive their execution; each is bounded and the host stays usable. Disk and tmpfs
filled as a whole: ``test_security_quota.py``."""

from __future__ import annotations

import os
import resource
import subprocess
import time
from pathlib import Path

import test_security_common
from test_security_common import World, assert_contained, attack, limits, snapshot

world = test_security_common.world  # the shared fixture

GRACE_S = 3.0  # allowed beyond the time budget for the kill and the clean-up


def _host_can_fork() -> bool:
    return subprocess.run(["true"], check=False).returncode == 0


def _processes_with(marker: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            continue
    return found


def test_fork_bomb_is_stopped_by_the_process_limit(world: World) -> None:
    before = snapshot(world.protected)
    code = """
import os
while True:
    os.fork()
"""
    start = time.monotonic()
    result, grade = attack(world, code, limits(timeout_s=5, max_procs=32))
    assert result.status in ("error", "killed", "memory")  # the memory watchdog may come first
    assert "BlockingIOError" in result.stderr_tail  # fork refused by RLIMIT_NPROC
    assert time.monotonic() - start < 5 + GRACE_S
    assert _host_can_fork()
    assert_contained(world, before, result, grade)


def test_single_allocation_over_the_memory_limit_fails(world: World) -> None:
    before = snapshot(world.protected)
    code = "x = bytearray(2 * 1024**3)\n"
    result, grade = attack(world, code, limits(memory_mb=512))
    assert result.status == "error"
    assert "MemoryError" in (result.traceback or "")
    assert_contained(world, before, result, grade)


def test_memory_spread_over_processes_is_killed_by_the_watchdog(world: World) -> None:
    before = snapshot(world.protected)
    # Each child stays under the per-process limit; together they pass the execution's limit.
    code = """
import os, time
for _ in range(6):
    if os.fork() == 0:
        block = bytearray(200 * 1024**2)
        block[::4096] = b"1" * len(block[::4096])
        time.sleep(60)
time.sleep(60)
"""
    result, grade = attack(world, code, limits(timeout_s=20, memory_mb=512))
    assert result.status == "memory" and result.extra["kill_reason"] == "memory"
    assert "over its limit of 512 MB" in result.extra["limit_detail"]
    assert result.wall_seconds < 20
    assert_contained(world, before, result, grade)


def test_infinite_loop_is_killed_at_the_time_limit(world: World) -> None:
    before = snapshot(world.protected)
    result, grade = attack(world, "while True:\n    pass\n", limits(timeout_s=2))
    assert result.status == "timeout"
    # charged its own time (a loaded machine's waits for a CPU are not its: wmrl/sandbox/supervise.py)
    assert 2 <= result.wall_seconds and result.wall_seconds - result.extra.get("held_back_seconds", 0.0) < 2 + GRACE_S
    assert_contained(world, before, result, grade)


def test_printing_gigabytes_keeps_only_a_bounded_tail(world: World) -> None:
    before = snapshot(world.protected)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    code = """
import sys
block = b"x" * (1 << 20)
for _ in range(1024):
    sys.stdout.buffer.write(block)
print("END")
"""
    result, grade = attack(world, code, limits(timeout_s=30, max_output_bytes=65536))
    assert result.status == "ok"
    assert result.extra["stdout_bytes"] > 1 << 30
    assert len(result.stdout_tail) <= 65536 and result.stdout_tail.endswith("END\n")
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    assert grown_mb < 64
    assert_contained(world, before, result, grade)


def test_writing_a_huge_file_stops_at_the_file_size_limit(world: World) -> None:
    before = snapshot(world.protected)
    code = """
with open("big.bin", "wb") as f:
    for _ in range(100):
        f.write(b"x" * (1 << 20))
"""
    result, grade = attack(world, code, limits(max_file_mb=8))
    assert result.status == "error"
    assert "File too large" in (result.traceback or "")
    assert (world.work_dir / "big.bin").stat().st_size <= 8 << 20
    assert_contained(world, before, result, grade)


def test_daemonized_child_does_not_outlive_the_execution(world: World) -> None:
    before = snapshot(world.protected)
    marker = f"wmrl-daemon-{world.secret[-12:]}"
    code = f"""
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        # The grandchild: detached, and it keeps touching a file in the work dir.
        if os.fork() == 0:
            os.execv("/bin/sh", ["/bin/sh", "-c", "sleep 300; : {marker}"])
        while True:
            with open("heartbeat.txt", "a") as f:
                f.write("beat\\n")
            time.sleep(0.05)
    os._exit(0)
time.sleep(0.5)
print("parent exits")
"""
    result, grade = attack(world, code, limits(timeout_s=10))
    assert result.status == "ok"
    assert _processes_with(marker) == []
    heartbeat = world.work_dir / "heartbeat.txt"
    size = heartbeat.stat().st_size
    time.sleep(0.3)
    assert heartbeat.stat().st_size == size
    assert_contained(world, before, result, grade)
