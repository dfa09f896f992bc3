"""Crash-safe file primitives for shared storage (NFS/Lustre).

Every file another process reads is written with :func:`atomic_write_bytes`: a temp file in the same
directory, flushed and fsynced, then ``os.replace``-d into place, then the directory fsynced. A reader
therefore sees either the old file, the new file, or no file, never a torn one. Temp files start with
``.tmp-`` so that directory scans can skip (and later sweep) leftovers of a crashed writer.

Files get the permissions the user's umask gives a new file (``mkstemp`` alone would make them 0600),
so that a lab can share a run directory or a task pool; :func:`share_with_group` hands a directory to
a Unix group (setgid: everything created below it inherits the group).
"""

from __future__ import annotations

import json
import math
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

TMP_PREFIX = ".tmp-"


def fsync_dir(directory: Path) -> None:
    """Persist a rename/creation inside ``directory`` (no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def current_umask() -> int:
    """The process umask, read without changing it (``os.umask`` can only set it; /proc tells it)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)  # no /proc: set and restore (racy only against another thread doing the same)
    os.umask(old)
    return old


def share_with_group(directory: Path, group: str) -> None:
    """Give ``directory`` to the Unix ``group`` with the setgid bit, so that every file and directory
    created below it belongs to that group (group rights then follow the umask, e.g. 0002)."""
    import grp

    try:
        gid = grp.getgrnam(group).gr_gid if not group.isdigit() else int(group)
    except KeyError:
        raise ValueError(f"group {group!r} does not exist on this machine (see `id -Gn`)") from None
    try:
        os.chown(directory, -1, gid)
        os.chmod(directory, os.stat(directory).st_mode | stat.S_ISGID)
    except PermissionError as err:
        raise ValueError(f"cannot give {directory} to group {group!r} ({err.strerror}); are you a member "
                         "of it (`id -Gn`)?") from None


def _durable_temp(path: Path, data: bytes) -> str:
    """A fsynced temp file holding ``data`` in ``path``'s directory (the caller renames or links it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX + path.name + ".", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), 0o666 & ~current_umask())
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        _unlink_quietly(tmp)
        raise
    return tmp


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temp file + fsync + rename + dir fsync)."""
    path = Path(path)
    tmp = _durable_temp(path, data)
    try:
        os.replace(tmp, path)
    except BaseException:
        _unlink_quietly(tmp)
        raise
    fsync_dir(path.parent)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def json_safe(obj: Any) -> Any:
    """``obj`` with every non-finite float (NaN, inf) as None, in dicts, lists and tuples: strict JSON."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def json_bytes(obj: Any) -> bytes:
    """The one JSON encoding of files on shared storage (NaN refused: it is no valid JSON)."""
    return (json.dumps(obj, indent=1, sort_keys=True, allow_nan=False) + "\n").encode("utf-8")


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, json_bytes(obj))


def append_line_durable(path: Path, line: str) -> None:
    """Append one newline-terminated record and fsync it (for append-only logs).

    A crash can leave at most a torn *last* line; readers of such logs must skip a final line that
    does not end in a newline or does not parse.
    """
    if "\n" in line:
        raise ValueError("a log record must be a single line")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as handle:
        handle.write(line.encode("utf-8") + b"\n")
        handle.flush()
        os.fsync(handle.fileno())


def read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def atomic_create_bytes(path: Path, data: bytes) -> bool:
    """Create ``path`` with ``data`` unless it already exists; return whether this call created it.

    The first writer wins and a later one never replaces it (temp file + fsync + ``os.link``, which
    fails with EEXIST on every filesystem, NFS included). Where NFS retransmits a LINK whose first
    reply was lost, the retry reports EEXIST although it succeeded: the temp file's link count
    (2 if our link went through) tells the two apart.
    """
    path = Path(path)
    tmp = _durable_temp(path, data)
    try:
        os.link(tmp, path)
        created = True
    except FileExistsError:
        created = os.stat(tmp).st_nlink > 1
    finally:
        _unlink_quietly(tmp)
    fsync_dir(path.parent)
    return created


def atomic_create_json(path: Path, obj: Any) -> bool:
    return atomic_create_bytes(path, json_bytes(obj))


def step_name(step: int) -> str:
    """The directory of a step's checkpoint or export (``step-00000012``): sorts in step order."""
    return f"step-{step:08d}"
