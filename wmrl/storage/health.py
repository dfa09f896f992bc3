"""Is a run's coordinator alive, and if not, what happened to it: what ``wmrl status`` and idle workers ask.

Sources, most direct first: the run lock (its holder and heartbeat: alive, or dead when the heartbeat
is stale or the holder's pid is gone on this host), the coordinator's event log (``crashed`` with the
error, ``terminated``, ``ended``), and on Slurm the scheduler (``squeue`` while a job is known to it,
``sacct`` for the final state and exit code of one that is over).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wmrl.io import append_line_durable, read_json
from wmrl.storage.lock import RunLock
from wmrl.storage.records import InvalidResult, parse_outcome
from wmrl.storage.rundir import RunDir
from wmrl.storage.spool import visible_names

EVENTS = "logs/coordinator-events.jsonl"
LIFECYCLE = ("started", "resumed", "crashed", "terminated", "requeue", "ended")


@dataclass(frozen=True)
class CoordinatorHealth:
    """``state``: alive | dead | stopped (requeued/terminated, or ended) | never (no start recorded)."""

    state: str
    detail: str
    last_error: str | None = None
    # Wall time of the coordinator's last sign of life (lock heartbeat, last event); None if none.
    last_seen: float | None = None


def record_event(run: RunDir, event: str, **fields: Any) -> None:
    """One line of the coordinator's event log (``EVENTS``): what happened, when, in which job."""
    line = json.dumps({"event": event, "at": time.time(), "pid": os.getpid(),
                       "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
                       "restart_count": os.environ.get("SLURM_RESTART_COUNT"), **fields}, sort_keys=True)
    append_line_durable(run.path / EVENTS, line)


def read_events(run: RunDir) -> list[dict[str, Any]]:
    """The coordinator's event log (a torn last line of a killed writer is skipped)."""
    out = []
    try:
        lines = (run.path / EVENTS).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return out
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            out.append(event)
    return out


def lifecycle_events(run: RunDir) -> list[dict[str, Any]]:
    return [e for e in read_events(run) if e.get("event") in LIFECYCLE]


def coordinator_health(run: RunDir, stale_s: float) -> CoordinatorHealth:
    events = lifecycle_events(run)
    crashed = [e for e in events if e["event"] == "crashed"]
    last_error = crashed[-1].get("error") if crashed else None
    probe = RunLock(run.lock_path, stale_s)
    seen = probe.read_holder()
    if seen is not None:
        holder, age = seen
        reason = probe.stale_reason(holder, age)
        beat = time.time() - age
        if reason is None:
            return CoordinatorHealth("alive", f"{holder.describe()}, heartbeat {age:.0f} s ago", last_error, beat)
        return CoordinatorHealth("dead", f"{holder.describe()}: {reason}", last_error, beat)
    if not events:
        return CoordinatorHealth("never", "no coordinator has started", None)
    last = events[-1]
    step, at = last.get("step"), last.get("at")
    if last["event"] == "crashed":
        return CoordinatorHealth("dead", f"crashed at step {step}", last_error, at)
    if last["event"] in ("ended", "terminated", "requeue"):
        return CoordinatorHealth("stopped", f"{last['event']} at step {step}", last_error, at)
    return CoordinatorHealth("dead", f"gone without a trace after '{last['event']}' at step {step} (killed?)",
                             last_error, at)


def slurm_final_states(job_ids: list[str]) -> dict[str, str]:
    """``{job_id: "FAILED exit 1:0"}`` from sacct for jobs squeue no longer lists ({} without sacct)."""
    if not job_ids:
        return {}
    try:
        out = subprocess.run(["sacct", "-n", "-P", "-X", "-j", ",".join(job_ids), "-o", "JobID,State,ExitCode"],
                             capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return {}
    states: dict[str, str] = {}
    for line in out.stdout.splitlines():
        parts = line.split("|")
        if len(parts) == 3:
            base = parts[0].split("_")[0]
            states[base] = f"{parts[1]} exit {parts[2]}"  # array: the last task listed
    return states


@dataclass(frozen=True)
class ResultCounts:
    """Result files of the spool as the coordinator would take them: accepted (done/failed) or not."""

    done: int
    failed: int
    invalid: int


def result_counts(run: RunDir) -> ResultCounts:
    """Read-only (nothing is quarantined): a junk or half-written file is counted invalid, never done."""
    done = failed = invalid = 0
    for name in visible_names(run.results):
        if not name.endswith(".json"):
            invalid += 1
            continue
        try:
            record = parse_outcome(read_json(run.results / name), name[:-5])
        except (OSError, ValueError, InvalidResult, UnicodeDecodeError):
            invalid += 1
            continue
        done += record.status == "done"
        failed += record.status == "failed"
    return ResultCounts(done, failed, invalid)


def latest_checkpoint_step(run: RunDir) -> int | None:
    try:
        return int(read_json(Path(run.path) / "checkpoints" / "LATEST")["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
