"""Running a run of a sweep again, keeping the old one: ``wmrl sweep SPEC --rerun NAME --why TEXT``.

A run is rerun when what it measured is known to be wrong (a node that starved its executions, a bug
fixed since, a tracking outage that cut its curve). Re-issuing the sweep cannot do it: the run is
finished, so it is skipped. ``--rerun`` supersedes the run instead, deleting nothing:

- its MLflow run is tagged (``wmrl.superseded_reason``, ``wmrl.superseded_at``, ``wmrl.superseded_dir``)
  and then marked deleted, which MLflow keeps restorable (``mlflow runs restore --run-id ID``): the
  parent's children, the MLflow UI and ``wmrl compare`` then see only the run that replaces it;
- its run directory moves to ``SWEEP/superseded/NAME-<UTC time>/`` (with its sweep log, as ``sweep.log``,
  and ``SUPERSEDED.json`` saying why), on the same filesystem, so nothing is copied;
- ``sweep.json`` lists it under ``superseded`` (a copy: the notes in ``superseded/`` are what is read).

The issue then runs NAME afresh, from the config file it had, like any run that has not finished; once
the new run has an MLflow run it is tagged ``wmrl.supersedes`` with the old run's id (a deleted MLflow run
cannot take tags, so the link is kept on the new run and in ``sweep.json``).

A run a coordinator still holds (a live run lock) or whose Slurm job is still queued or running is
refused: stop it first. MLflow is changed before anything moves, so a tracking server that cannot be
reached stops the rerun with nothing moved; a rerun cut short after that is completed by issuing it again.
"""

from __future__ import annotations

import difflib
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wmrl.config import ConfigError
from wmrl.io import atomic_write_json, fsync_dir, read_json
from wmrl.storage.lock import RunLock
from wmrl.storage.rundir import RunDir
from wmrl.sweep.spec import SweepSpec
from wmrl.sweep.state import MLFLOW_PENDING, SweepDir, live_job

SUPERSEDED = "superseded"  # the folder of the sweep directory that keeps superseded runs
SUPERSEDED_NOTE = "SUPERSEDED.json"  # in a superseded run's directory: why, when, which MLflow run


@dataclass(frozen=True)
class Rerun:
    names: tuple[str, ...]
    why: str

    @classmethod
    def from_args(cls, names: Sequence[str] | None, why: str | None) -> Rerun | None:
        """The request of the command line: ``--rerun`` needs ``--why``, and ``--why`` needs ``--rerun``."""
        if not names:
            if why:
                raise ConfigError("--why explains a --rerun: give the run(s) to run again with --rerun NAME")
            return None
        if not (why and why.strip()):
            raise ConfigError("--rerun needs --why 'what was wrong with the run' (kept in sweep.json, in the "
                              "run's SUPERSEDED.json and on its MLflow run)")
        return cls(tuple(dict.fromkeys(names)), why.strip())


def supersede(sweep: SweepDir, spec: SweepSpec, rerun: Rerun, tracking_uri: str | None) -> list[dict[str, Any]]:
    """Supersede each run of ``rerun`` (module doc); returns the entries added to ``sweep.json``.
    Every name is checked before anything changes. A run superseded already for the same reason is not
    superseded again: the same command issued again (after a kill) continues its rerun."""
    names = [r.name for r in spec.runs]
    done = {(e["name"], e["why"]): e for e in superseded_runs(sweep)}
    todo = []
    for name in rerun.names:
        if (name, rerun.why) in done:
            print(f"sweep {spec.name}: run {name} was superseded for this reason already "
                  f"({done[name, rerun.why]['dir']}): its rerun continues", flush=True)
            continue
        todo.append(name)
        if name not in names:
            close = difflib.get_close_matches(name, names, n=3)
            raise ConfigError(f"--rerun {name}: no such run in sweep {spec.name!r}"
                              + (f"; did you mean {', '.join(close)}?" if close else f" (runs: {', '.join(names[:6])}, ...)"))
        run = sweep.run_path(name)
        if not run.is_dir():
            raise ConfigError(f"--rerun {name}: the run has not started ({run} does not exist); a plain issue "
                              "of the sweep runs it")
        busy = _busy(run)
        if busy:
            raise ConfigError(f"--rerun {name}: the run is still running ({busy}); stop it first "
                              f"(`wmrl cancel {run}`), then rerun it")
    entries = []
    for name in todo:
        entries.append(_supersede_one(sweep, name, rerun.why, tracking_uri))
        sweep.update(superseded=superseded_runs(sweep))
        print(f"sweep {spec.name}: run {name} superseded ({rerun.why}); kept in {entries[-1]['dir']}", flush=True)
    return entries


def superseded_runs(sweep: SweepDir) -> list[dict[str, Any]]:
    """Every superseded run of the sweep, oldest first, read from the notes in their directories (the
    truth; ``sweep.json``'s list is a copy of it)."""
    notes = []
    for note in sorted((sweep.root / SUPERSEDED).glob(f"*/{SUPERSEDED_NOTE}")):
        try:
            notes.append(read_json(note))
        except (OSError, ValueError):
            continue  # written atomically by wmrl: unreadable means not ours
    return sorted(notes, key=lambda e: e.get("at", 0.0))


def link_reruns(sweep: SweepDir, tracking_uri: str | None) -> None:
    """Tag each rerun's new MLflow run ``wmrl.supersedes`` (the old run's id), once it has one; what the
    tracking store refuses now is tried again at the next issue."""
    entries = superseded_runs(sweep)
    pending = [e for e in entries if e.get("mlflow_run_id") and not e.get("rerun_mlflow_run_id")]
    if not (pending and tracking_uri):
        return
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    for entry in pending:
        new_id = _mlflow_run_id(sweep.run_path(entry["name"]))
        if new_id is None or new_id == entry["mlflow_run_id"]:
            continue
        try:
            client.set_tag(new_id, "wmrl.supersedes", entry["mlflow_run_id"])
            client.set_tag(new_id, "wmrl.supersedes_reason", entry["why"])
        except Exception as err:  # noqa: BLE001 - a tag is not worth a failed sweep; the next issue retries
            print(f"wmrl sweep: warning: could not tag the rerun of {entry['name']} in MLflow "
                  f"({type(err).__name__}: {err}); the next issue tries again", flush=True)
            continue
        entry["rerun_mlflow_run_id"] = new_id
        atomic_write_json(sweep.root / entry["dir"] / SUPERSEDED_NOTE, entry)
    sweep.update(superseded=entries)


def _busy(run: Path) -> str | None:
    """Why the run cannot be superseded now: a coordinator holding its lock, or its Slurm job alive."""
    lock = RunLock(RunDir(run).lock_path)
    seen = lock.read_holder()
    if seen is not None and lock.stale_reason(*seen) is None:
        holder, age = seen
        return f"its coordinator, {holder.describe()}, last heartbeat {age:.0f} s ago"
    job = live_job(run)
    return f"Slurm job {job}" if job else None


def _mlflow_run_id(run: Path) -> str | None:
    try:
        return (run / MLFLOW_PENDING).read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def _supersede_one(sweep: SweepDir, name: str, why: str, tracking_uri: str | None) -> dict[str, Any]:
    run = sweep.run_path(name)
    at = time.time()
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(at))
    dest = sweep.root / SUPERSEDED / f"{name}-{stamp}"
    if dest.exists():
        raise ConfigError(f"--rerun {name}: {dest} exists already; try again in a second")
    run_id = _mlflow_run_id(run)
    entry = {"name": name, "why": why, "at": at, "dir": str(dest.relative_to(sweep.root)), "mlflow_run_id": run_id,
             "rerun_mlflow_run_id": None}
    if run_id and tracking_uri:
        _retire_mlflow_run(tracking_uri, run_id, entry)
    atomic_write_json(run / SUPERSEDED_NOTE, entry)
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.rename(run, dest)  # one rename: the run is either where it was or kept whole, never half moved
    log = sweep.root / "logs" / f"{name}.log"
    if log.exists():
        os.rename(log, dest / "sweep.log")
    fsync_dir(dest.parent)
    fsync_dir(sweep.runs)
    return entry


def _retire_mlflow_run(tracking_uri: str, run_id: str, entry: dict[str, Any]) -> None:
    """Tag the old MLflow run with why and where it went, then mark it deleted (restorable)."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    try:
        if client.get_run(run_id).info.lifecycle_stage == "deleted":
            return  # an earlier rerun got this far before it was cut short
        client.set_tag(run_id, "wmrl.superseded_reason", entry["why"])
        client.set_tag(run_id, "wmrl.superseded_at", time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(entry["at"])))
        client.set_tag(run_id, "wmrl.superseded_dir", entry["dir"])
        client.delete_run(run_id)
    except Exception as err:  # noqa: BLE001 - e.g. a tracking server that cannot be reached
        if isinstance(err, MlflowException) and err.error_code == "RESOURCE_DOES_NOT_EXIST":
            return  # the store no longer has it (a new store): nothing to retire
        raise ConfigError(f"--rerun {entry['name']}: could not retire its MLflow run {run_id} at {tracking_uri} "
                          f"({type(err).__name__}: {err}); nothing was moved") from None
