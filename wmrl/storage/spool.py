"""The anchor spool: a work queue made of files on shared storage, safe without locks.

Every transition is a single atomic filesystem operation that only one process can win:

- enqueue:  create ``queue/<id>.json`` (no replace: an already queued id stays as it is);
- claim:    ``rename(queue/<id>.json, claims/<id>.<worker>.json)``: of several workers one wins,
            the others get ENOENT and try the next request;
- lease:    the claim's owner touches the claim file every ``heartbeat_s``; an observer that sees
            the file's mtime unchanged for ``lease_s`` *on its own clock* (no cross-node clock
            comparison) takes it by renaming it to a private ``.reclaim-*`` name, then re-queues it
            with ``attempt + 1``, or, after ``max_attempts``, publishes a ``failed`` result;
- publish:  create ``results/<id>.json`` with ``os.link`` (no replace): the first result counts,
            a duplicate is ignored;
- cancel:   a marker ``cancelled/<id>``, then the queued file is removed; a worker holding the
            request drops its result when it sees the marker.

Readers skip names starting with ``.`` (``.tmp-*`` of unfinished or crashed writers, ``.reclaim-*``)
and :meth:`Spool.sweep_tmp` deletes old ``.tmp-*`` leftovers.
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wmrl.io import TMP_PREFIX, atomic_create_json, atomic_write_json, atomic_write_text
from wmrl.storage.records import (
    ExecutionOutcomeRecord,
    ExecutionRequest,
    InvalidResult,
    check_id,
    parse_outcome,
)
from wmrl.storage.rundir import RunDir, host_name

log = logging.getLogger(__name__)
RECLAIM_PREFIX = ".reclaim-"


# Workers and the coordinator's service each sweep crashed writers' temp files this often.
SWEEP_EVERY_S = 300.0


@dataclass
class Claim:
    """A request this process holds (its file is ``path``)."""

    request: ExecutionRequest
    attempt: int
    errors: list[str]
    path: Path


class LeaseWatch:
    """Decides lease expiry from what *this* observer saw: a name whose mtime has not changed for
    ``lease_s`` of the observer's monotonic clock is expired. A fresh observer therefore waits one
    full lease before reclaiming anything, which is the safe side after a restart."""

    def __init__(self, lease_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.lease_s = lease_s
        self.clock = clock
        self._seen: dict[str, tuple[int, float]] = {}

    def expired(self, tokens: dict[str, int]) -> list[str]:
        now = self.clock()
        for name in list(self._seen):
            if name not in tokens:
                del self._seen[name]
        out = []
        for name, token in tokens.items():
            seen = self._seen.get(name)
            if seen is None or seen[0] != token:
                self._seen[name] = (token, now)
            elif now - seen[1] >= self.lease_s:
                out.append(name)
        return out


def visible_names(directory: Path) -> list[str]:
    """Entries a reader may take: no temp files, no private names. Sorted (= FIFO by step)."""
    try:
        return sorted(n for n in os.listdir(directory) if not n.startswith("."))
    except FileNotFoundError:
        return []


@dataclass
class Spool:
    run: RunDir
    max_attempts: int = 3
    tmp_max_age_s: float = 3600.0
    # NFS: a file just listed may not be readable yet (attribute/lookup caches); retry a little.
    read_retries: int = 4
    read_backoff_s: float = 0.02

    # ------------------------------------------------------------------ queue
    def enqueue(self, request: ExecutionRequest, attempt: int = 0, errors: Iterable[str] = ()) -> bool:
        """Queue ``request`` unless it is queued already; returns whether it was added."""
        payload = {"request": request.to_dict(), "attempt": attempt, "errors": list(errors)}
        return atomic_create_json(self.run.queue / f"{request.request_id}.json", payload)

    def queued_ids(self) -> list[str]:
        return [n[:-5] for n in visible_names(self.run.queue) if n.endswith(".json")]

    def claimed_ids(self) -> dict[str, str]:
        """``{request_id: worker_id}`` of current claims."""
        out = {}
        for name in visible_names(self.run.claims):
            parts = name.split(".")
            if len(parts) == 3 and parts[2] == "json":
                out[parts[0]] = parts[1]
        return out

    def done_ids(self) -> list[str]:
        return [n[:-5] for n in visible_names(self.run.results) if n.endswith(".json")]

    def result_exists(self, request_id: str) -> bool:
        return (self.run.results / f"{request_id}.json").exists()

    # ------------------------------------------------------------------ claims
    def claim_next(self, worker_id: str) -> Claim | None:
        check_id("worker_id", worker_id)
        for name in visible_names(self.run.queue):
            if not name.endswith(".json"):
                continue
            target = self.run.claims / f"{name[:-5]}.{worker_id}.json"
            try:
                os.rename(self.run.queue / name, target)
            except FileNotFoundError:
                continue  # another worker won this one
            os.utime(target)  # the lease starts now (rename kept the enqueue mtime)
            try:
                return self._load_claim(target)
            except (OSError, ValueError, KeyError, TypeError) as err:
                self.quarantine(target, f"unreadable queue entry: {err}")
        return None

    def _load_claim(self, path: Path) -> Claim:
        with open(path, encoding="utf-8") as handle:
            payload = json.load(handle)
        request = ExecutionRequest.from_dict(payload["request"])
        return Claim(request, int(payload.get("attempt", 0)), list(payload.get("errors", [])), path)

    def renew(self, claim: Claim) -> bool:
        """Extend the lease; False once the claim is no longer ours (it was reclaimed)."""
        try:
            os.utime(claim.path)
            return True
        except FileNotFoundError:
            return False

    def drop(self, claim: Claim) -> None:
        try:
            os.unlink(claim.path)
        except FileNotFoundError:
            pass

    def release(self, claim: Claim) -> bool:
        """Give the request back unchanged (preemption is not the request's fault)."""
        if not claim.path.exists():
            return False
        self.enqueue(claim.request, claim.attempt, claim.errors)
        self.drop(claim)
        return True

    def retry_or_fail(self, claim: Claim, error: str, by: str) -> str:
        """Count a failed attempt: re-queue with ``attempt + 1`` or publish a failed result."""
        attempt = claim.attempt + 1
        errors = [*claim.errors, error][-self.max_attempts:]
        if self.is_cancelled(claim.request.request_id):
            outcome = "cancelled"
        elif attempt >= self.max_attempts:
            now = time.time()
            record = ExecutionOutcomeRecord(
                claim.request.request_id, claim.request.run_id, "failed", None, {}, by, attempt,
                now, now, 0.0, f"gave up after {attempt} attempts: " + " | ".join(errors),
            )
            self.publish(record)
            outcome = "failed"
        else:
            self.enqueue(claim.request, attempt, errors)
            outcome = "requeued"
        self.drop(claim)
        log.warning("request %s: %s (%s)", claim.request.request_id, outcome, error)
        return outcome

    def reclaim_expired(self, watch: LeaseWatch, by: str) -> list[str]:
        """Return requests whose lease expired (as ``watch`` saw it) to the queue; ids handled."""
        tokens: dict[str, int] = {}
        try:
            names = os.listdir(self.run.claims)
        except FileNotFoundError:
            return []
        for name in names:
            if name.startswith(TMP_PREFIX):
                continue
            try:
                tokens[name] = os.stat(self.run.claims / name).st_mtime_ns
            except FileNotFoundError:
                continue
        handled = []
        for name in watch.expired(tokens):
            private = self.run.claims / f"{RECLAIM_PREFIX}{uuid.uuid4().hex}"
            try:
                os.rename(self.run.claims / name, private)  # only one observer wins
            except FileNotFoundError:
                continue
            try:
                claim = self._load_claim(private)
            except (OSError, ValueError, KeyError, TypeError) as err:
                self.quarantine(private, f"unreadable claim {name}: {err}")
                continue
            holder = name.split(".")[1] if not name.startswith(RECLAIM_PREFIX) else "a reclaimer"
            self.retry_or_fail(claim, f"lease of {holder} expired", by)
            handled.append(claim.request.request_id)
        return handled

    # ------------------------------------------------------------------ results
    def publish(self, record: ExecutionOutcomeRecord) -> bool:
        """First result for an id wins; returns False for a duplicate (ignored)."""
        created = atomic_create_json(self.run.results / f"{record.request_id}.json", record.to_dict())
        if not created:
            log.info("duplicate result for %s ignored", record.request_id)
        return created

    def read_result(self, request_id: str) -> ExecutionOutcomeRecord | None:
        """The validated result, or None if there is none (yet).

        A file that stays unreadable or invalid over a few retries is quarantined and
        :class:`InvalidResult` raised: it is never parsed as a score.
        """
        path = self.run.results / f"{request_id}.json"
        reason = ""
        for attempt in range(self.read_retries):
            if attempt:
                time.sleep(self.read_backoff_s * 2 ** (attempt - 1))
            try:
                raw = path.read_bytes()
            except FileNotFoundError:
                reason = "missing"
                continue
            try:
                return parse_outcome(json.loads(raw.decode("utf-8")), request_id)
            except (UnicodeDecodeError, json.JSONDecodeError) as err:
                reason = f"not valid JSON ({len(raw)} bytes): {err}"
            except InvalidResult as err:
                reason = str(err)
        if reason == "missing":
            return None
        self.quarantine(path, reason)
        raise InvalidResult(f"{path}: {reason}")

    def quarantine(self, path: Path, reason: str) -> Path | None:
        """Move ``path`` aside with a ``.reason`` file next to it; None if it was already gone."""
        base = path.name if not path.name.startswith(".") else path.name.lstrip(".")
        target = self.run.quarantine / f"{base}.{int(time.time())}.{uuid.uuid4().hex[:8]}"
        try:
            os.rename(path, target)
        except FileNotFoundError:
            return None
        note = {"reason": reason, "source": str(path), "at": time.time(), "by_host": host_name(),
                "by_pid": os.getpid()}
        atomic_write_text(target.with_name(target.name + ".reason"), json.dumps(note, indent=1) + "\n")
        log.error("quarantined %s: %s", path, reason)
        return target

    # ------------------------------------------------------------------ cancel
    def cancel(self, request_id: str) -> bool:
        """Mark cancelled and remove from the queue; returns whether it was still queued."""
        atomic_write_json(self.run.cancelled / request_id, {"at": time.time()})
        try:
            os.unlink(self.run.queue / f"{request_id}.json")
            return True
        except FileNotFoundError:
            return False

    def uncancel(self, request_id: str) -> None:
        try:
            os.unlink(self.run.cancelled / request_id)
        except FileNotFoundError:
            pass

    def is_cancelled(self, request_id: str) -> bool:
        return (self.run.cancelled / request_id).exists()

    # ------------------------------------------------------------------ housekeeping
    def sweep_tmp(self, now: float | None = None) -> int:
        """Delete ``.tmp-*`` leftovers of crashed writers older than ``tmp_max_age_s``."""
        now = time.time() if now is None else now
        removed = 0
        for directory in (self.run.queue, self.run.claims, self.run.results, self.run.quarantine,
                          self.run.cancelled, self.run.workers):
            try:
                names = [n for n in os.listdir(directory) if n.startswith(TMP_PREFIX)]
            except FileNotFoundError:
                continue
            for name in names:
                try:
                    if now - os.stat(directory / name).st_mtime > self.tmp_max_age_s:
                        os.unlink(directory / name)
                        removed += 1
                except FileNotFoundError:
                    continue
        return removed

    def counts(self) -> dict[str, Any]:
        return {
            "queued": len(self.queued_ids()),
            "claimed": len(self.claimed_ids()),
            "done": len(self.done_ids()),
            "quarantined": sum(n.endswith(".reason") for n in visible_names(self.run.quarantine)),
        }
