"""Directories built once and keyed by a content hash (the tiny model, SFT outputs).

A cached directory is complete exactly when its ``wmrl_build.json`` carries the expected hash: it is
built in a sibling temp directory and renamed into place only when finished, under a file lock, so a
crash leaves no half-written cache entry and two processes never build the same entry at once. A
directory that exists without a matching marker was not made by this build and is never overwritten.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wmrl.io import TMP_PREFIX, atomic_write_json, fsync_dir, read_json

MARKER = "wmrl_build.json"
CACHE_ENV = "WMRL_CACHE"


class CacheConflict(RuntimeError):
    """The output directory exists but holds something else (another build, or files not ours)."""


def cache_root(configured: str | Path = "") -> Path:
    """``configured`` if set, else ``$WMRL_CACHE``, else ``~/.cache/wmrl``."""
    if configured:
        return Path(configured).expanduser()
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    return Path.home() / ".cache" / "wmrl"


def content_hash(obj: Any) -> str:
    """sha256 of the canonical JSON of ``obj`` (sorted keys): equal inputs, equal hash."""
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def built_hash(directory: Path) -> str | None:
    """The content hash a finished build recorded in ``directory``, or None."""
    try:
        return str(read_json(Path(directory) / MARKER)["hash"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def build_once(
    out: Path, digest: str, build: Callable[[Path], dict[str, Any]]
) -> tuple[Path, bool]:
    """Return ``(out, built_now)``; run ``build(tmp_dir)`` only if ``out`` is not already complete.

    ``build`` writes the directory's files into ``tmp_dir`` and returns facts to record in the marker
    (sizes, seconds, ...). Raises :class:`CacheConflict` when ``out`` exists with another content.
    """
    out = Path(out)
    if built_hash(out) == digest:
        return out, False
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f".{out.name}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if built_hash(out) == digest:  # another process finished it while we waited
                return out, False
            if out.exists():
                raise CacheConflict(
                    f"{out} exists but is not the output of this build (its {MARKER} records hash "
                    f"{built_hash(out)!r}, this build is {digest[:16]}); choose another --out or remove it"
                )
            # Leftovers of killed builds of this same output (any pid): nobody else builds it while
            # we hold the lock, so they are ours to remove.
            for stale in out.parent.glob(f"{TMP_PREFIX}{out.name}.*"):
                shutil.rmtree(stale, ignore_errors=True)
            tmp = out.parent / f"{TMP_PREFIX}{out.name}.{os.getpid()}"
            tmp.mkdir()
            try:
                facts = build(tmp)
                atomic_write_json(tmp / MARKER, {"hash": digest, **facts})
                os.rename(tmp, out)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            fsync_dir(out.parent)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return out, True


def build_hash_of_dir(directory: Path) -> str:
    """Identity of a model directory for cache keys: its build marker, else a hash of its files.

    Hashing a 9B checkpoint reads it once (about a minute); wmrl's own builds carry a marker instead.
    """
    directory = Path(directory)
    marker = built_hash(directory)
    if marker is not None:
        return marker
    digest = hashlib.sha256()
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(directory)).encode("utf-8") + b"\0")
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()
