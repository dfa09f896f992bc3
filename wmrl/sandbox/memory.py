"""Memory of one execution, as the host's watchdog sees it: its processes plus its tmpfs files.

* Processes: proportional set size (PSS) where the kernel offers it. Pages shared between the
  processes, e.g. copy-on-write pages after a fork, count once in the sum instead of once per
  process (summing RSS would report a forked 300 MB process as 600 MB).
* tmpfs: files in the sandbox's own tmpfs mounts (bwrap's /tmp and /dev/shm) are shmem pages. Once
  the file is closed no process's PSS shows them, yet the node has lost that RAM until the mount
  goes. They are found from a process inside the sandbox: its ``mountinfo`` names the tmpfs mounts
  of its mount namespace (those the host also sees are not the execution's), ``statvfs`` through
  ``/proc/PID/root`` gives their used pages.
* A tmpfs page a process also maps would count twice (in its PSS and in the mount); the PSS of
  mappings on those mounts is taken off again, so every page counts once. For a process that maps
  shmem, both its PSS and the part of it on those mounts come from ONE pass over ``/proc/PID/smaps``:
  taking the PSS from ``smaps_rollup`` and the part from a later ``smaps`` read raced the process
  (a mapping gone in between, e.g. at exit, left its pages in the PSS and took nothing off: a 160 MB
  mapped file counted twice, a good solution killed at 256 MB under load).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
KB = 1024


@dataclass(frozen=True)
class MemorySample:
    total_mb: float  # processes + tmpfs, each page once: what the limit is checked against
    tmpfs_mb: float  # of which: files in the sandbox's own tmpfs mounts


def _rollup_kb(pid: int) -> tuple[float, float]:
    """(Pss, Pss_Shmem) of one process in kB; RSS and 0 on kernels without smaps_rollup."""
    pss = shmem = 0.0
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    pss = float(line.split()[1])
                elif line.startswith(b"Pss_Shmem:"):
                    shmem = float(line.split()[1])
        return pss, shmem
    except FileNotFoundError:
        if not os.path.exists(f"/proc/{pid}"):
            raise
    with open(f"/proc/{pid}/statm", "rb") as f:
        return int(f.read().split()[1]) * PAGE_BYTES / KB, 0.0


def _rollups(pids: list[int]) -> dict[int, tuple[float, float]]:
    """pid -> (Pss, Pss_Shmem) in kB; processes that vanished meanwhile are left out."""
    out = {}
    for pid in pids:
        try:
            out[pid] = _rollup_kb(pid)
        except (OSError, IndexError, ValueError):
            continue
    return out


def peak_process_mb(pids: list[int]) -> float:
    """The largest high-water mark (VmHWM) among ``pids``: catches a spike between two samples.

    VmHWM belongs to the process's address space since its last exec, unlike ``ru_maxrss``, which
    Linux carries across fork and exec and so reports the supervisor's own size for a small child.
    """
    peak_kb = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status", "rb") as f:
                for line in f:
                    if line.startswith(b"VmHWM:"):
                        peak_kb = max(peak_kb, float(line.split()[1]))
                        break
        except (OSError, IndexError, ValueError):
            continue
    return peak_kb / KB


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def tmpfs_mounts(mountinfo: str) -> dict[int, str]:
    """Device -> mount point of the writable tmpfs mounts listed in a ``mountinfo`` text."""
    found: dict[int, str] = {}
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 6 or not tail or tail[0] != "tmpfs":
            continue
        if "rw" not in fields[5].split(","):
            continue
        major, _, minor = fields[2].partition(":")
        found.setdefault(os.makedev(int(major), int(minor)), _unescape(fields[4]))
    return found


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def sandbox_tmpfs(pids: list[int]) -> tuple[int, dict[int, str]] | None:
    """(pid inside the sandbox, its own tmpfs mounts), or None (no process in another namespace)."""
    own_ns = os.readlink("/proc/self/ns/mnt")
    host = _read("/proc/self/mountinfo") or ""
    for pid in pids:
        try:
            if os.readlink(f"/proc/{pid}/ns/mnt") == own_ns:
                continue
        except OSError:
            continue
        info = _read(f"/proc/{pid}/mountinfo")
        if info is None:
            continue
        mounts = tmpfs_mounts(info)
        for dev in tmpfs_mounts(host):
            mounts.pop(dev, None)  # the host sees it too: not the execution's own memory
        return pid, mounts
    return None


def tmpfs_used_bytes(pid: int, mounts: dict[int, str]) -> int:
    total = 0
    for dev, point in mounts.items():
        path = f"/proc/{pid}/root{point}"
        try:
            if os.stat(path).st_dev != dev:  # the process left, or the mount moved: not ours
                continue
            st = os.statvfs(path)
        except OSError:
            continue
        total += (st.f_blocks - st.f_bfree) * st.f_frsize
    return total


def smaps_pss_kb(pid: int, devices: set[int]) -> tuple[float, float] | None:
    """(PSS of ``pid``, PSS of its mappings whose backing file lies on one of ``devices``) in kB, both
    from one pass over ``/proc/PID/smaps`` (every mapping in both sums or in neither); None when the
    process is gone."""
    total = mapped = 0.0
    current = False
    try:
        with open(f"/proc/{pid}/smaps", "rb") as f:
            for line in f:
                head = line.split(maxsplit=6)
                if len(head) >= 5 and b"-" in head[0] and not head[0].endswith(b":"):
                    major, _, minor = head[3].partition(b":")
                    current = os.makedev(int(major, 16), int(minor, 16)) in devices
                elif line.startswith(b"Pss:"):
                    kb = float(line.split()[1])
                    total += kb
                    mapped += kb if current else 0.0
    except (OSError, ValueError):
        return None
    return total, mapped


def execution_memory(pids: list[int]) -> MemorySample:
    """Memory of the execution whose processes are ``pids``: processes + own tmpfs, each page once."""
    rollups = _rollups(pids)
    pss_kb = sum(p for p, _ in rollups.values())
    tmpfs = sandbox_tmpfs(pids)
    tmpfs_bytes = 0
    if tmpfs is not None and tmpfs[1]:
        inside, mounts = tmpfs
        tmpfs_bytes = tmpfs_used_bytes(inside, mounts)
        if tmpfs_bytes:
            devices = set(mounts)
            for pid, (rollup_pss, shm) in rollups.items():
                if shm > 0:  # re-read whole: its PSS now, less what of it lies on the tmpfs mounts
                    now = smaps_pss_kb(pid, devices)
                    pss_kb += (now[0] - now[1] if now is not None else 0.0) - rollup_pss
    return MemorySample(
        total_mb=max(0.0, pss_kb) / KB + tmpfs_bytes / 2**20, tmpfs_mb=tmpfs_bytes / 2**20
    )
