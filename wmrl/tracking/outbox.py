"""The tracking outbox of a run: every tracking record is written to the run directory first.

::

    RUN_DIR/tracking/
      outbox.jsonl   one record per line: {"seq", "kind", ...} (create, resume, metrics, tags, artifact, status)
      sent.json      {"upto": seq}: every record up to seq has reached the tracking store
      state.json     what `wmrl status` shows: pending records, the last error, since when it fails

Records are sent in ``seq`` order and ``sent.json`` moves forward after each sending (one record for a
running coordinator, a whole backlog for ``wmrl sync``). A crash between sending and moving it re-sends
those records later, which changes nothing in MLflow: metrics carry
their own timestamp (MLflow stores a metric once per (key, step, timestamp, value)), params, tags,
artifacts and the run status overwrite themselves with the same value. So every record reaches the
store exactly once in effect, however often sending is interrupted.

One writer appends (the run's coordinator, which holds the run lock); ``wmrl sync`` only sends.
A run whose records are all known at once (a finished ``wmrl simulate`` run) writes them with
:meth:`Outbox.extend`: a new journal appears whole or not at all.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wmrl.io import atomic_write_json, atomic_write_text, read_json

DIRECTORY = "tracking"
KINDS = ("create", "resume", "metrics", "tags", "artifact", "status")


@dataclass(frozen=True)
class OutboxState:
    """The outbox as ``wmrl status`` reports it."""

    records: int
    pending: int
    last_error: str | None
    failing_since: float | None
    last_sent_at: float | None


class Outbox:
    def __init__(self, run_path: Path) -> None:
        self.directory = Path(run_path) / DIRECTORY
        self.journal = self.directory / "outbox.jsonl"
        self.sent_path = self.directory / "sent.json"
        self.state_path = self.directory / "state.json"
        self._next: int | None = None

    # ------------------------------------------------------------------ writing
    def append(self, kind: str, **data: Any) -> int:
        """Durably add one record; returns its sequence number."""
        return self.extend([(kind, data)])[0]

    def extend(self, records: list[tuple[str, dict[str, Any]]]) -> list[int]:
        """Add many ``(kind, data)`` records in one write; a journal that does not exist yet is written
        atomically (all records or none), an existing one gets them appended with one fsync."""
        for kind, _ in records:
            if kind not in KINDS:
                raise ValueError(f"unknown tracking record kind {kind!r}; allowed: {', '.join(KINDS)}")
        if self._next is None:
            self._next = max((r["seq"] for r in self.records()), default=-1) + 1
        seqs = list(range(self._next, self._next + len(records)))
        text = "".join(json.dumps({"seq": seq, "kind": kind, **data}, sort_keys=True, allow_nan=False) + "\n"
                       for seq, (kind, data) in zip(seqs, records))
        if not self.journal.exists():
            self.directory.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.journal, text)
        else:  # one fsync for the lot; a crash can tear only the last line written, which records() skips
            with open(self.journal, "ab") as handle:
                handle.write(text.encode("utf-8"))
                handle.flush()
                os.fsync(handle.fileno())
        self._next += len(records)
        return seqs

    # ------------------------------------------------------------------ reading
    def records(self) -> list[dict[str, Any]]:
        """Every whole record (a torn last line of a crashed writer is skipped)."""
        try:
            lines = self.journal.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        out = []
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and isinstance(record.get("seq"), int) and record.get("kind") in KINDS:
                out.append(record)
        return out

    def sent_upto(self) -> int:
        try:
            return int(read_json(self.sent_path)["upto"])
        except (OSError, ValueError, KeyError, TypeError):
            return -1

    def pending(self) -> list[dict[str, Any]]:
        upto = self.sent_upto()
        return [r for r in self.records() if r["seq"] > upto]

    def has(self, kind: str) -> bool:
        return any(r["kind"] == kind for r in self.records())

    # ------------------------------------------------------------------ progress
    def mark_sent(self, seq: int) -> None:
        if seq > self.sent_upto():
            atomic_write_json(self.sent_path, {"upto": seq, "at": time.time()})

    def write_state(self, last_error: str | None, failing_since: float | None,
                    last_sent_at: float | None) -> None:
        atomic_write_json(self.state_path, {"last_error": last_error, "failing_since": failing_since,
                                            "last_sent_at": last_sent_at, "updated_at": time.time()})

    def state(self) -> OutboxState:
        try:
            saved = read_json(self.state_path)
        except (OSError, ValueError):
            saved = {}
        records = self.records()
        upto = self.sent_upto()
        return OutboxState(len(records), sum(r["seq"] > upto for r in records), saved.get("last_error"),
                           saved.get("failing_since"), saved.get("last_sent_at"))
