"""Run one sandbox command under supervision: bounded output, wall-time and memory watchdog.

Shared by every backend: a backend builds the command line and the environment, this module
starts it in its own session, keeps only the tail of its output, kills the whole execution on
timeout or when its summed memory passes the limit, and makes sure nothing survives it.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from wmrl.sandbox.base import SandboxLimits
from wmrl.sandbox.limits import (
    ProcSelector,
    cpu_seconds,
    find_processes,
    kill_all,
    peak_process_mb,
    resident_mb,
)

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

    reason: str  # "exited", "timeout", "memory"
    exit_code: int | None
    wall_seconds: float
    cpu_seconds: float
    peak_memory_mb: float
    stdout: TailBuffer
    stderr: TailBuffer
    survivors: int = 0
    extra: dict[str, float | int | str] = field(default_factory=dict)


def supervise(
    argv: list[str],
    env: dict[str, str],
    limits: SandboxLimits,
    selector_for: Callable[[int], ProcSelector],
    pass_fds: tuple[int, ...] = (),
    cwd: Path | None = None,
) -> Outcome:
    """Run ``argv`` to completion or until a limit trips; always leaves no process behind.

    ``selector_for(pid)`` says which host processes belong to the execution whose top process is
    ``pid`` (its uid, or its session). ``pass_fds`` are inherited by the command.
    """
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

    reason, status, rusage = "exited", 0, None
    peak_mb, cpu_seen, polls = 0.0, 0.0, 0
    deadline = start + limits.timeout_s
    while True:
        pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        now = time.monotonic()
        if now > deadline:
            reason = "timeout"
        elif polls % MEMORY_EVERY == 0:
            pids = find_processes(selector)
            used = resident_mb(pids)
            peak_mb = max(peak_mb, used, peak_process_mb(pids))
            cpu_seen = max(cpu_seen, cpu_seconds(pids))
            if used > limits.memory_mb:
                reason = "memory"
        if reason != "exited":
            _kill(proc.pid, selector)
            _, status, rusage = os.wait4(proc.pid, 0)
            break
        polls += 1
        time.sleep(POLL_S)
    wall = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    # Whatever the solution left running (daemons, double forks) dies with it.
    survivors = kill_all(selector)
    for t in readers:
        t.join(timeout=2.0)
    for stream in (proc.stdout, proc.stderr):
        stream.close()  # type: ignore[union-attr]

    ru_cpu = rusage.ru_utime + rusage.ru_stime if rusage else 0.0
    # Not rusage.ru_maxrss: Linux keeps it across fork + exec, so it would report this (possibly
    # large) supervising process's size for every solution; peak_mb comes from the samples above.
    return Outcome(
        reason=reason,
        exit_code=proc.returncode,
        wall_seconds=wall,
        cpu_seconds=max(ru_cpu, cpu_seen),
        peak_memory_mb=peak_mb,
        stdout=out,
        stderr=err,
        survivors=survivors,
        extra={"stdout_bytes": out.total, "stderr_bytes": err.total},
    )


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
