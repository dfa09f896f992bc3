"""One coordinator per run: a lock file with its owner and a heartbeat, breakable only when stale.

The lock is ``RUN_LOCK`` in the run directory, created with ``os.link`` (fails if it exists, NFS
included) and holding the owner (host, pid, Slurm job id and restart count, start time, a random
token). The holder touches it every ``heartbeat_s``. A contender may break it when

- the holder is this same Slurm job, requeued (same ``SLURM_JOB_ID``, higher ``SLURM_RESTART_COUNT``):
  at once, since that job is by definition no longer running its old incarnation;
- the holder ran on this host and its pid is gone: at once;
- otherwise, once its mtime is older than ``stale_s`` (clocks of the nodes must agree to well within
  ``stale_s``; NTP keeps them within milliseconds on a cluster).

Breaking renames the lock to a unique ``RUN_LOCK.broken-*`` name (only one contender can win that
rename), checks that the renamed file is the very lock it judged (else puts it back), then competes
for a fresh create: two contenders can never both win. A holder that finds a foreign token in the
lock at its next heartbeat has lost it and says so (``RunLock.lost``).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Self

from wmrl.io import atomic_create_json
from wmrl.storage.rundir import host_name

log = logging.getLogger(__name__)


class RunLockHeld(RuntimeError):
    """Another live coordinator holds the run lock."""


@dataclass(frozen=True)
class LockOwner:
    host: str
    pid: int
    slurm_job_id: str | None
    restart_count: int
    started_at: float
    token: str

    @classmethod
    def current(cls) -> LockOwner:
        env = os.environ
        return cls(host_name(), os.getpid(), env.get("SLURM_JOB_ID"),
                   int(env.get("SLURM_RESTART_COUNT", "0") or 0), time.time(), uuid.uuid4().hex)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LockOwner:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__})

    def describe(self) -> str:
        job = f", Slurm job {self.slurm_job_id} (restart {self.restart_count})" if self.slurm_job_id else ""
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started_at))
        return f"pid {self.pid} on host {self.host}{job}, started {started}"


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs on this host (a zombie counts as dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


class RunLock:
    def __init__(self, path: Path, stale_s: float = 120.0, heartbeat_s: float | None = None,
                 owner: LockOwner | None = None, on_lost: Callable[[str], None] | None = None) -> None:
        # A heartbeat at most half of stale_s (the config's rule for launch.timing.lock_*): slower, a live
        # holder's lock would look stale between two beats and a contender could break it (two holders).
        if heartbeat_s is None:
            heartbeat_s = min(10.0, stale_s / 4)
        if not 0 < heartbeat_s <= stale_s / 2:
            raise ValueError(f"run lock heartbeat_s={heartbeat_s} must be in (0, stale_s / 2 = {stale_s / 2}]")
        self.path = Path(path)
        self.stale_s = stale_s
        self.heartbeat_s = heartbeat_s
        self.owner = owner or LockOwner.current()
        self.on_lost = on_lost
        self.lost: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ reading the holder
    def read_holder(self, path: Path | None = None) -> tuple[LockOwner, float] | None:
        """(holder, seconds since its last heartbeat), or None if there is no lock."""
        path = path or self.path
        try:
            age = time.time() - os.stat(path).st_mtime
            with open(path, encoding="utf-8") as handle:
                return LockOwner.from_dict(json.load(handle)), age
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError):
            # A lock is created whole by link(); unreadable means corrupted: treat as an unknown owner.
            return LockOwner("?", -1, None, 0, 0.0, "corrupt"), age

    def stale_reason(self, holder: LockOwner, age: float) -> str | None:
        me = self.owner
        if holder.slurm_job_id and holder.slurm_job_id == me.slurm_job_id \
                and me.restart_count > holder.restart_count:
            return f"Slurm job {me.slurm_job_id} was requeued (restart {holder.restart_count} -> {me.restart_count})"
        if holder.host == me.host and holder.pid > 0 and not pid_alive(holder.pid):
            return f"holder pid {holder.pid} is no longer running on {me.host}"
        if age > self.stale_s:
            return f"no heartbeat for {age:.0f} s (stale after {self.stale_s:.0f} s)"
        return None

    # ------------------------------------------------------------------ acquire / release
    def acquire(self) -> None:
        for _ in range(10):
            if atomic_create_json(self.path, asdict(self.owner)):
                log.info("run lock %s acquired by %s", self.path, self.owner.describe())
                self._start_heartbeat()
                return
            seen = self.read_holder()
            if seen is None:
                continue  # released meanwhile: try again
            holder, age = seen
            reason = self.stale_reason(holder, age)
            if reason is None:
                raise RunLockHeld(
                    f"run directory {self.path.parent} is in use by another coordinator: "
                    f"{holder.describe()}, last heartbeat {age:.0f} s ago. If that job is dead, the "
                    f"lock becomes stale {self.stale_s:.0f} s after its last heartbeat; cancel it "
                    f"(scancel) or wait, then start again."
                )
            self._break(holder, reason)
        raise RunLockHeld(f"could not take the run lock {self.path}: contended by other coordinators")

    def _break(self, judged: LockOwner, reason: str) -> None:
        broken = self.path.with_name(f"{self.path.name}.broken-{uuid.uuid4().hex[:12]}")
        try:
            os.rename(self.path, broken)
        except FileNotFoundError:
            return  # another contender broke it first
        seen = self.read_holder(broken)
        if seen is None or seen[0].token != judged.token or self.stale_reason(*seen) is None:
            # The file we renamed is not the stale lock we judged (it was replaced or renewed): put it
            # back. If a third process created a new lock meanwhile, the holder of the one we moved
            # sees a foreign token at its next heartbeat and stops.
            try:
                os.link(broken, self.path)
            except FileExistsError:
                pass
            os.unlink(broken)
            return
        log.warning("broke stale run lock of %s: %s", judged.describe(), reason)

    def holds(self) -> bool:
        seen = self.read_holder()
        return seen is not None and seen[0].token == self.owner.token

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.holds():
            os.unlink(self.path)

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    # ------------------------------------------------------------------ heartbeat
    def _start_heartbeat(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, name="run-lock-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            if not self.holds():
                self.lost = f"run lock {self.path} was taken over by another coordinator"
                log.error(self.lost)
                if self.on_lost is not None:
                    self.on_lost(self.lost)
                return
            try:
                os.utime(self.path)
            except FileNotFoundError:
                continue  # checked again at the next beat
