"""Run one sandbox command under supervision: bounded output, time, memory and disk watchdog.

Shared by every backend: a backend builds the command line and the environment and names the host
directories the execution can write; this module starts it in its own session, keeps only the
tail of its output, kills the whole execution on timeout, when its memory (processes plus its tmpfs
files) passes the limit or when what it wrote passes its disk quota, and makes sure nothing
survives it.

The time limit is the solution's own time: wall seconds less the longest any of its threads waited,
runnable, for a CPU (``/proc/*/task/*/schedstat``), but at least its CPU time over its ``cpus`` (so
threads it crowds onto its own CPUs earn nothing). A solution on a loaded machine (a sweep at nice 19
beside other work got ~1.5% of a core) is not stopped for time the machine did not give it, which the
workers would otherwise score 0 as the solution's timeout. A hard wall limit (``max_wall_factor`` x
the budget) still bounds it; stopped there before using its time, the execution *stalled*: an
infrastructure failure (:class:`~wmrl.sandbox.runspec.ExecutionStalled`), retried, never scored.
"""

from __future__ import annotations

import os
import resource
import signal
import stat
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from wmrl.sandbox.base import SandboxLimits
from wmrl.sandbox.disk import DiskWatch
from wmrl.sandbox.limits import ProcSelector, cpu_seconds, find_processes, kill_all, run_delays
from wmrl.sandbox.memory import execution_memory, peak_process_mb

POLL_S = 0.05  # how often the watchdog looks at the execution
MEMORY_EVERY = 4  # ... and at its memory every this many polls


class TailBuffer:
    """Keeps (about) the last ``cap`` bytes written to it and counts the rest.

    Whole chunks are dropped from the front, so a solution printing gigabytes costs O(cap)
    memory and no quadratic copying; ``text()`` trims to exactly ``cap`` bytes.
    """

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.chunks: deque[bytes] = deque()
        self.kept = 0
        self.total = 0

    def write(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self.chunks.append(chunk)
        self.kept += len(chunk)
        while self.kept - len(self.chunks[0]) >= self.cap:
            self.kept -= len(self.chunks.popleft())

    def text(self) -> str:
        return b"".join(self.chunks)[-self.cap :].decode("utf-8", "replace")


def _drain(stream: IO[bytes], buf: TailBuffer) -> None:
    # Read in fixed chunks: memory stays O(cap) whatever the solution prints.
    while True:
        chunk = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
        if not chunk:
            return
        buf.write(chunk)


@dataclass
class Outcome:
    """What the supervisor saw; a backend turns it into an ``ExecutionResult``."""

    reason: str  # "exited", "timeout", "memory", "disk_quota", "stalled"
    exit_code: int | None
    wall_seconds: float
    cpu_seconds: float
    peak_memory_mb: float
    stdout: TailBuffer
    stderr: TailBuffer
    survivors: int = 0
    detail: str = ""  # why a limit stopped it, in words for the agent's feedback
    extra: dict[str, float | int | str] = field(default_factory=dict)
    held_back_seconds: float = 0.0  # wall time not charged: the longest any thread waited for a CPU


def supervise(
    argv: list[str],
    env: dict[str, str],
    limits: SandboxLimits,
    selector_for: Callable[[int], ProcSelector],
    pass_fds: tuple[int, ...] = (),
    cwd: Path | None = None,
    writable: Sequence[Path] = (),
) -> Outcome:
    """Run ``argv`` to completion or until a limit trips; always leaves no process behind.

    ``selector_for(pid)`` says which host processes belong to the execution whose top process is
    ``pid`` (its uid, or its session). ``pass_fds`` are inherited by the command. ``writable``:
    every host directory the execution can write, together under ``limits.disk_quota_mb``.
    """
    disk = DiskWatch(writable, limits.disk_quota_mb, limits.max_files) if writable else None
    out, err = TailBuffer(limits.max_output_bytes), TailBuffer(limits.max_output_bytes)
    start = time.monotonic()
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,  # its own process group: one killpg reaches all of it
        close_fds=True,
        pass_fds=pass_fds,
        cwd=cwd,
    )
    selector = selector_for(proc.pid)
    readers = [
        threading.Thread(target=_drain, args=(proc.stdout, out), daemon=True),
        threading.Thread(target=_drain, args=(proc.stderr, err), daemon=True),
    ]
    for t in readers:
        t.start()
    try:
        watch = _watch(proc.pid, selector, limits, disk, start)
    except BaseException:
        # The supervisor itself is stopping (a worker's Preempted, Ctrl-C): the execution must not
        # outlive it (in its own session it would run on, orphaned, after the worker left).
        _kill(proc.pid, selector)
        proc.wait()
        raise
    wall = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(watch.status)
    # Whatever the solution left running (daemons, double forks) dies with it.
    survivors = kill_all(selector)
    if watch.reason == "exited" and disk is not None:
        # Whatever it wrote between the last walk and its exit: over the quota is over the quota.
        over = disk.check()
        if over:
            watch.reason, watch.detail = "disk_quota", over
    for t in readers:
        t.join(timeout=2.0)
    for stream in (proc.stdout, proc.stderr):
        stream.close()  # type: ignore[union-attr]

    ru_cpu = watch.rusage.ru_utime + watch.rusage.ru_stime if watch.rusage else 0.0
    # Not rusage.ru_maxrss: Linux keeps it across fork + exec, so it would report this (possibly
    # large) supervising process's size for every solution; peak_mb comes from the watchdog's samples.
    return Outcome(
        reason=watch.reason,
        exit_code=proc.returncode,
        wall_seconds=wall,
        cpu_seconds=max(ru_cpu, watch.cpu_seen),
        peak_memory_mb=watch.peak_mb,
        stdout=out,
        stderr=err,
        survivors=survivors,
        detail=watch.detail,
        extra=_extra(out, err, watch.tmpfs_peak_mb, disk),
        held_back_seconds=watch.held_back,
    )


@dataclass
class _Watch:
    """What the watchdog saw of a running execution, and how it ended."""

    reason: str = "exited"  # as Outcome.reason
    detail: str = ""
    status: int = 0  # the wait status of the top process
    rusage: resource.struct_rusage | None = None
    peak_mb: float = 0.0
    tmpfs_peak_mb: float = 0.0
    cpu_seen: float = 0.0
    run_delay: dict[int, float] = field(default_factory=dict)  # by thread id, the latest seen

    @property
    def held_back(self) -> float:
        return max(self.run_delay.values(), default=0.0)

    def sample_time(self, pids: list[int]) -> None:
        self.run_delay.update(run_delays(pids))
        self.cpu_seen = max(self.cpu_seen, cpu_seconds(pids))

    def charged(self, wall: float, limits: SandboxLimits) -> float:
        """The solution's own time after ``wall`` seconds: wall less what it waited for a CPU, but
        never less than its CPU time at its CPUs' rate (its own threads crowding each other are its
        doing) and never more than the wall clock."""
        return min(wall, max(wall - self.held_back, self.cpu_seen / max(1, limits.cpus)))

    def sample_memory(self, pids: list[int], limits: SandboxLimits) -> None:
        """Record the execution's memory; over the memory limit, it is to be stopped."""
        used = execution_memory(pids)
        self.peak_mb = max(self.peak_mb, used.total_mb, peak_process_mb(pids))
        self.tmpfs_peak_mb = max(self.tmpfs_peak_mb, used.tmpfs_mb)
        if used.total_mb > limits.memory_mb:
            self.reason, self.detail = "memory", _memory_detail(used.total_mb, used.tmpfs_mb, limits)


def _watch(pid: int, selector: ProcSelector, limits: SandboxLimits, disk: DiskWatch | None, start: float) -> _Watch:
    """Poll the execution whose top process is ``pid`` until it exits or a limit trips; a tripped
    limit kills the whole execution. Returns once the top process is reaped."""
    watch, polls = _Watch(), 0
    pids: list[int] = []
    wall_limit = limits.timeout_s * limits.max_wall_factor
    while True:
        done, watch.status, watch.rusage = os.wait4(pid, os.WNOHANG)
        if done:
            return watch
        now = time.monotonic()
        if watch.charged(now - start, limits) > limits.timeout_s:
            watch.sample_time(find_processes(selector))  # the latest counts, before judging
            if watch.charged(now - start, limits) > limits.timeout_s:
                watch.reason = "timeout"
        if watch.reason == "exited" and now - start > wall_limit:
            watch.reason = "stalled"
            watch.detail = (f"the machine held it back {watch.held_back:.0f} s of {now - start:.0f} s (waiting for a "
                            f"CPU); stopped at {limits.max_wall_factor:g}x its {limits.timeout_s:g} s budget")
        elif watch.reason == "exited" and polls % MEMORY_EVERY == 0:
            pids = find_processes(selector)
            watch.sample_memory(pids, limits)
            watch.sample_time(pids)
        if watch.reason == "exited" and disk is not None and disk.due(now, pids):
            over = disk.check(pids)
            if over:
                watch.reason, watch.detail = "disk_quota", over
        if watch.reason != "exited":
            _kill(pid, selector)
            _, watch.status, watch.rusage = os.wait4(pid, 0)
            return watch
        polls += 1
        time.sleep(POLL_S)


def _memory_detail(total_mb: float, tmpfs_mb: float, limits: SandboxLimits) -> str:
    where = f" ({tmpfs_mb:.0f} MB of it files in /tmp or /dev/shm)" if tmpfs_mb >= 1 else ""
    return f"it used {total_mb:.0f} MB of memory{where}, over its limit of {limits.memory_mb} MB"


def _extra(
    out: TailBuffer, err: TailBuffer, tmpfs_peak_mb: float, disk: DiskWatch | None
) -> dict[str, float | int | str]:
    extra: dict[str, float | int | str] = {"stdout_bytes": out.total, "stderr_bytes": err.total}
    extra["tmpfs_peak_mb"] = round(tmpfs_peak_mb, 1)
    if disk is not None:
        extra["disk_peak_mb"] = round(disk.peak_bytes / 2**20, 1)
        extra["disk_peak_files"] = disk.peak_files
    return extra


def _kill(pid: int, selector: ProcSelector) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    kill_all(selector, settle_s=0.5)


def read_small(path: Path, cap: int) -> str | None:
    """The last ``cap`` bytes of a text file the sandbox wrote, never following a symlink."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        size = os.fstat(fd).st_size
        f.seek(max(0, size - cap))
        return f.read(cap).decode("utf-8", "replace")
