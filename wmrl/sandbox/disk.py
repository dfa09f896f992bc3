"""Disk quota of one execution: the bytes and files it holds in the host directories it can write.

Measured from the host, without root and without cgroups, so it holds the same way for bwrap and
Apptainer on any file system a cluster gives (local disk, NFS, Lustre). The alternatives need root
(a loop-mounted image per execution, XFS project quotas) or a RAM-backed work dir (a tmpfs would
put checkpoints in memory and vanish before grading), so the supervisor walks the execution's
directories instead, every poll, and kills the execution once it is over:

* a file counts at the larger of its apparent size and its allocated blocks: on NFS and Lustre the
  blocks lag behind writes still in the client cache, and a sparse file may be filled at any time;
* a hard-linked file counts once;
* a file the solution deleted but still holds open or mapped counts too (``/proc/PID/fd`` and
  ``/proc/PID/maps`` of its processes, on the devices of its directories);
* the walk stops as soon as either bound is passed, so it costs at most ``max_files`` entries, and
  a walk that took long spaces the next one out (the supervisor spends at most ~1/BACKOFF of a
  core) -- unless the processes' write counters (``/proc/PID/io``) say they wrote enough since the
  last walk to have used up what was left of the quota: then it walks at once. Writing is the only
  way to fill a disk fast, so a fast writer is looked at often however large its tree is.

It is a watchdog, not a kernel quota: between two walks the solution can write at disk speed, so
it overshoots by (write rate x interval); ``RLIMIT_FSIZE`` (set to at most the quota) bounds any
single file, and a solution that ends over its quota is reported ``disk_quota`` all the same.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

MB = 1024 * 1024
MIN_INTERVAL_S = 0.05  # walk at most this often ...
BACKOFF = 10.0  # ... and wait at least BACKOFF x the last walk's cost, unless much was written


@dataclass(frozen=True)
class DiskUsage:
    bytes: int
    files: int  # directory entries (files, directories, links) below the walked directories
    problem: str | None = None  # a directory that could not be measured


def _file_bytes(st: os.stat_result) -> int:
    return max(st.st_size, st.st_blocks * 512)


def _scandir(top: str) -> Iterable[os.DirEntry[str]] | None:
    """Entries of ``top``; a directory the solution made unreadable is made readable again (it
    belongs to the execution and is deleted with it). None if it vanished."""
    try:
        return list(os.scandir(top))
    except FileNotFoundError:
        return None
    except PermissionError:
        os.chmod(top, stat.S_IMODE(os.lstat(top).st_mode) | stat.S_IRWXU)
        return list(os.scandir(top))


def tree_usage(dirs: Sequence[Path], max_bytes: int, max_files: int) -> DiskUsage:
    """Bytes and entries below ``dirs`` (links not followed); stops once past either bound."""
    seen: set[tuple[int, int]] = set()
    total = files = 0
    todo = [str(d) for d in dirs]
    while todo:
        top = todo.pop()
        try:
            entries = _scandir(top)
        except OSError as err:
            return DiskUsage(total, files, f"cannot measure {top}: {err.strerror}")
        for entry in entries or ():
            files += 1
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISDIR(st.st_mode):
                todo.append(entry.path)
                total += st.st_blocks * 512
            elif st.st_nlink > 1:
                if (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    total += _file_bytes(st)
            else:
                total += _file_bytes(st)
            if total > max_bytes or files > max_files:
                return DiskUsage(total, files)
    return DiskUsage(total, files)


def _maps_dev(field: str) -> int:
    major, _, minor = field.partition(":")
    return os.makedev(int(major, 16), int(minor, 16))


def deleted_but_held(pids: Iterable[int], devices: set[int]) -> int:
    """Bytes of files on ``devices`` that ``pids`` deleted but still hold open or mapped.

    A walk cannot see them, yet their blocks stay allocated until the last holder exits.
    """
    seen: set[tuple[int, int]] = set()
    total = 0
    for pid in pids:
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                st = os.stat(f"{fd_dir}/{fd}")  # follows the magic link to the (deleted) file
            except OSError:
                continue
            key = (st.st_dev, st.st_ino)
            if (
                stat.S_ISREG(st.st_mode)
                and st.st_nlink == 0
                and st.st_dev in devices
                and key not in seen
            ):
                seen.add(key)
                total += _file_bytes(st)
        total += _deleted_mapped(pid, devices, seen)
    return total


def _deleted_mapped(pid: int, devices: set[int], seen: set[tuple[int, int]]) -> int:
    """Mappings of deleted files (the descriptor may be closed): their size bounds their blocks."""
    total = 0
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
            lines = [line for line in f if line.rstrip().endswith("(deleted)")]
    except OSError:
        return 0
    for line in lines:
        fields = line.split()
        try:
            dev, ino = _maps_dev(fields[3]), int(fields[4])
            start, _, end = fields[0].partition("-")
        except (IndexError, ValueError):
            continue
        if dev in devices and (dev, ino) not in seen:
            seen.add((dev, ino))
            total += int(end, 16) - int(start, 16)
    return total


def _io_bytes(pid: int) -> int | None:
    """Bytes ``pid`` has written so far: write() calls (``wchar``) or pages it dirtied (mmap)."""
    try:
        with open(f"/proc/{pid}/io", "rb") as f:
            fields = dict(line.split(b":", 1) for line in f.read().splitlines() if b":" in line)
        return max(int(fields[b"wchar"]), int(fields[b"write_bytes"]))
    except (OSError, KeyError, ValueError):
        return None


class DiskWatch:
    """The supervisor's disk check: ``check`` says why the execution is over its quota, or None."""

    def __init__(self, dirs: Sequence[Path], quota_mb: int, max_files: int) -> None:
        self.dirs = [Path(d) for d in dirs]
        self.quota_bytes = quota_mb * MB
        self.quota_mb = quota_mb
        self.max_files = max_files
        self.devices = {Path(d).stat().st_dev for d in self.dirs if Path(d).exists()}
        self.next_at = 0.0
        self.peak_bytes = 0
        self.peak_files = 0
        self.headroom = self.quota_bytes  # what was left of the quota at the last walk
        self.written = 0  # bytes the processes wrote since the last walk
        self.io_seen: dict[int, int] = {}

    def due(self, now: float, pids: Iterable[int] = ()) -> bool:
        """Time for a walk: the interval passed, or enough was written to use up the headroom."""
        for pid in pids:
            current = _io_bytes(pid)
            if current is not None:
                self.written += max(0, current - self.io_seen.get(pid, 0))
                self.io_seen[pid] = current
        return now >= self.next_at or self.written >= self.headroom

    def check(self, pids: Iterable[int] = ()) -> str | None:
        start = time.monotonic()
        usage = tree_usage(self.dirs, self.quota_bytes, self.max_files)
        used = usage.bytes + deleted_but_held(pids, self.devices)
        self.next_at = time.monotonic() + max(MIN_INTERVAL_S, BACKOFF * (time.monotonic() - start))
        self.peak_bytes = max(self.peak_bytes, used)
        self.peak_files = max(self.peak_files, usage.files)
        self.headroom, self.written = self.quota_bytes - used, 0
        if usage.problem:
            return usage.problem
        if used > self.quota_bytes:
            return f"it wrote {used / MB:.0f} MB, over its disk quota of {self.quota_mb} MB"
        if usage.files > self.max_files:
            return f"it created more than {self.max_files} files and directories"
        return None
