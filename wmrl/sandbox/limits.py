"""Host-side, cgroup-free enforcement: find an execution's processes, their CPU time, kill them.

Inside the sandbox the launcher sets rlimits (address space, process count, file size). What an
rlimit cannot bound -- leftover processes, the memory of all processes together (``memory``), the
disk they fill together (``disk``) -- the host watches, finding the execution's processes here by
scanning ``/proc``: either every process of the execution's own uid (bwrap as root gives each
execution a fresh uid) or every descendant of the execution's top process (other backends; inside
a pid namespace orphans are re-parented to its init, so they stay descendants).
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from dataclasses import dataclass

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# Execution uids are drawn from here: far above any real account and below 2**31.
UID_LOW, UID_HIGH = 0x4000_0000, 0x7FFF_0000


@dataclass(frozen=True)
class ProcSelector:
    """Which host processes belong to one execution: by uid, or as descendants of ``root``."""

    uid: int | None = None
    root: int | None = None


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode("ascii", "replace")
    except OSError:
        return None
    # The command name may contain spaces and parentheses: split after the last ')'.
    return raw[raw.rfind(")") + 2 :].split()


def _uid_of(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    alive = _pids()
    if root not in alive:
        return []  # exited and reaped; orphans of a pid namespace died with it
    for pid in alive:
        fields = _stat_fields(pid)
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(pid)  # field 4: parent pid
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def find_processes(sel: ProcSelector) -> list[int]:
    if sel.uid is not None:
        return [pid for pid in _pids() if _uid_of(pid) == sel.uid]
    if sel.root is not None:
        return _descendants(sel.root)
    return []


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of ``pids`` and their reaped children."""
    total = 0
    for pid in pids:
        fields = _stat_fields(pid)
        if fields is None:
            continue
        # fields 14-17 of stat (utime, stime, cutime, cstime); our list starts at field 3.
        total += sum(int(x) for x in fields[11:15])
    return total / CLOCK_TICKS


def run_delays(pids: list[int]) -> dict[int, float]:
    """Seconds each thread of ``pids`` has spent runnable but waiting for a CPU (schedstat's run
    delay, by thread id): time the machine held it back, which its own code did not spend."""
    delays: dict[int, float] = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                    delays[int(tid)] = int(f.read().split()[1]) / 1e9
            except (OSError, IndexError, ValueError):
                continue  # exited meanwhile, or a kernel without schedstat: nothing held back is seen
    return delays


def kill_all(sel: ProcSelector, settle_s: float = 2.0) -> int:
    """SIGKILL every matching process until none is left (or ``settle_s`` passed); return survivors."""
    deadline = time.monotonic() + settle_s
    while True:
        pids = find_processes(sel)
        if not pids:
            return 0
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if time.monotonic() > deadline:
            return len(find_processes(sel))
        time.sleep(0.02)


def fresh_uid() -> int:
    """A uid no running process has: the identity of one execution."""
    in_use = {_uid_of(pid) for pid in _pids()}
    while True:
        uid = UID_LOW + secrets.randbelow(UID_HIGH - UID_LOW)
        if uid not in in_use:
            return uid
