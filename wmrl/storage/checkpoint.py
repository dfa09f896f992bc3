"""Coordinator checkpoints: a complete, verified copy of the training state at a step boundary.

::

    checkpoints/
      step-00000012/
        trainer.pkl          the trainer's state (policy, optimizer, RNG, cost counters, step)
        files/<dir>/<name>   snapshotted directories (calibration/: pool log, pool + calibrator state)
        manifest.json        step, sha256 of every file, state digest, why and when it was written
      LATEST                 {"name": "step-00000012", "step": 12}, replaced after the directory is whole

A checkpoint is written into a ``.tmp-*`` directory (every file fsynced) and renamed into place, then
``LATEST`` is replaced: a crash at any point leaves the previous checkpoint as the latest. A reader
verifies every hash and falls back to the newest older checkpoint that verifies.

The state is taken in memory at the step boundary (:class:`Snapshot`), so a signal handler that fires
in the middle of the next step writes the boundary state, never a half-updated one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wmrl.io import TMP_PREFIX, atomic_write_json, fsync_dir, read_json, step_name

log = logging.getLogger(__name__)
LATEST = "LATEST"
MANIFEST = "manifest.json"
KEEP = 2  # checkpoints kept: the newest, and one to fall back on if it turns out unreadable


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Snapshot:
    """The training state at the end of step ``step`` (``step`` steps done), as bytes."""

    step: int
    trainer: bytes  # pickle of the trainer's state dict
    files: dict[str, bytes]  # "calibration/pool.json" -> content
    digest: str  # the trainer's state digest (see Trainer.state_digest)
    meta: dict[str, Any] = field(default_factory=dict)

    def trainer_state(self) -> dict[str, Any]:
        return pickle.loads(self.trainer)


def read_tree(root: Path, prefix: str) -> dict[str, bytes]:
    """All regular files below ``root`` (skipping temp files), keyed ``prefix/relative/path``."""
    out: dict[str, bytes] = {}
    if not root.is_dir():
        return out
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.name.startswith(TMP_PREFIX):
            out[f"{prefix}/{path.relative_to(root).as_posix()}"] = path.read_bytes()
    return out


def _write_synced(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


class CheckpointStore:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.unreadable: list[str] = []  # why latest() skipped each checkpoint it could not verify

    # ------------------------------------------------------------------ write
    def write(self, snap: Snapshot, reason: str) -> Path:
        """Persist ``snap`` (idempotent for a step already saved with the same digest)."""
        self.root.mkdir(parents=True, exist_ok=True)
        final = self.root / step_name(snap.step)
        existing = self._manifest(final)
        if existing is not None and existing.get("digest") == snap.digest:
            self._point_latest(final.name, snap.step)
            return final
        tmp = self.root / f"{TMP_PREFIX}{final.name}-{uuid.uuid4().hex[:8]}"
        files = {"trainer.pkl": snap.trainer, **{f"files/{k}": v for k, v in snap.files.items()}}
        for rel, data in files.items():
            _write_synced(tmp / rel, data)
        manifest = {
            "step": snap.step, "digest": snap.digest, "reason": reason, "written_at": time.time(),
            "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
            "restart_count": os.environ.get("SLURM_RESTART_COUNT"),
            "sha256": {rel: sha256(data) for rel, data in files.items()}, **snap.meta,
        }
        _write_synced(tmp / MANIFEST, (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode())
        for directory in {(tmp / rel).parent for rel in files} | {tmp}:
            fsync_dir(directory)
        if final.exists():  # same step, other state (cannot happen in a deterministic trainer): replace
            shutil.rmtree(final)
        os.rename(tmp, final)
        fsync_dir(self.root)
        self._point_latest(final.name, snap.step)
        self._prune()
        log.info("checkpoint %s written (%s, digest %s)", final.name, reason, snap.digest[:12])
        return final

    def _point_latest(self, name: str, step: int) -> None:
        atomic_write_json(self.root / LATEST, {"name": name, "step": step})

    def _prune(self) -> None:
        names = sorted(p.name for p in self.root.glob("step-*") if p.is_dir())
        for name in names[:-KEEP]:
            shutil.rmtree(self.root / name, ignore_errors=True)
        for leftover in self.root.glob(f"{TMP_PREFIX}step-*"):
            # Unfinished writes of a process that died (or a signal handler that pre-empted a write).
            if time.time() - leftover.stat().st_mtime > 60:
                shutil.rmtree(leftover, ignore_errors=True)

    # ------------------------------------------------------------------ read
    def _manifest(self, directory: Path) -> dict[str, Any] | None:
        try:
            return read_json(directory / MANIFEST)
        except (OSError, ValueError):
            return None

    def load(self, directory: Path) -> Snapshot:
        """Read and verify one checkpoint directory; ValueError naming the bad file otherwise."""
        manifest = self._manifest(directory)
        if manifest is None:
            raise ValueError(f"{directory}: no readable {MANIFEST}")
        contents: dict[str, bytes] = {}
        for rel, digest in manifest["sha256"].items():
            data = (directory / rel).read_bytes()
            if sha256(data) != digest:
                raise ValueError(f"{directory / rel}: content does not match its sha256 in {MANIFEST}")
            contents[rel] = data
        files = {rel.removeprefix("files/"): data for rel, data in contents.items() if rel.startswith("files/")}
        meta = {k: v for k, v in manifest.items() if k not in ("step", "digest", "sha256")}
        return Snapshot(int(manifest["step"]), contents["trainer.pkl"], files, manifest["digest"], meta)

    def latest(self) -> Snapshot | None:
        """The newest checkpoint that verifies (LATEST first), or None for a fresh run."""
        candidates: list[Path] = []
        try:
            candidates.append(self.root / read_json(self.root / LATEST)["name"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
        candidates += sorted((p for p in self.root.glob("step-*") if p.is_dir()), reverse=True)
        self.unreadable = []
        for directory in dict.fromkeys(candidates):
            try:
                return self.load(directory)
            except (OSError, ValueError, KeyError) as err:
                log.error("skipping checkpoint %s: %s", directory, err)
                self.unreadable.append(f"{directory.name}: {err}")
        return None


def restore_tree(files: dict[str, bytes], prefix: str, target: Path) -> None:
    """Make ``target`` hold exactly the snapshotted files under ``prefix`` (and nothing else).

    Built next to ``target`` and swapped in by renames; a crash midway is repaired by the next
    restore, which every coordinator start performs.
    """
    staging = target.with_name(f"{TMP_PREFIX}{target.name}-restore-{uuid.uuid4().hex[:8]}")
    for key, data in files.items():
        head, _, rel = key.partition("/")
        if head == prefix:
            _write_synced(staging / rel, data)
    staging.mkdir(parents=True, exist_ok=True)
    fsync_dir(staging)
    old = target.with_name(f"{TMP_PREFIX}{target.name}-old-{uuid.uuid4().hex[:8]}")
    if target.exists():
        os.rename(target, old)
    os.rename(staging, target)
    fsync_dir(target.parent)
    shutil.rmtree(old, ignore_errors=True)
