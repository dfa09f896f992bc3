"""The sweep directory: ``<runs_root>/sweeps/<name>/`` with ``sweep.json`` and one run directory per run.

A run's state is read from its own files, never from a list the driver keeps, so a sweep killed at
any moment and issued again sees exactly what finished:

- ``simulate`` runs: ``result.json`` (the run's numbers, written atomically by the process that
  computed them) then ``mlflow.json`` (written once its MLflow child run is FINISHED; absent when
  tracking is off). Finished = both (or ``result.json`` with tracking off).
- ``launch`` runs: a finished coordinator writes ``ENDED`` with reason ``finished``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wmrl.config import ConfigError
from wmrl.io import atomic_write_json, read_json
from wmrl.sweep.spec import SweepSpec

SWEEP_FILE = "sweep.json"
RESULT = "result.json"
MLFLOW_DONE = "mlflow.json"
MLFLOW_PENDING = "mlflow_run_id"  # a child run being logged (the coordinator's own file name)
SWEEP_JOB = "sweep-job.json"  # the Slurm job id of a run's job (--executor slurm)


@dataclass(frozen=True)
class SweepDir:
    root: Path

    @classmethod
    def for_spec(cls, spec: SweepSpec, runs_root: str | Path) -> SweepDir:
        return cls(Path(runs_root).absolute() / "sweeps" / spec.name)

    @property
    def runs(self) -> Path:
        return self.root / "runs"

    def run_path(self, name: str) -> Path:
        return self.runs / name

    def read(self) -> dict[str, Any] | None:
        path = self.root / SWEEP_FILE
        return read_json(path) if path.exists() else None

    def open(self, spec: SweepSpec) -> tuple[dict[str, Any], list[str]]:
        """Create the sweep's record, or check a re-issued spec against it; returns the record and the
        runs the spec adds to it.

        A re-issued spec may add runs (more seeds, another grid value: ``extend`` records them once
        their configs are written) but must keep every run it had. A kept run whose config changed is
        refused by the caller's check of the config file that run was given."""
        state = self.read()
        if state is None:
            self.runs.mkdir(parents=True, exist_ok=True)
            state = {"name": spec.name, "kind": spec.kind, "digest": spec.digest(), "spec": spec.source,
                     "runs": [r.name for r in spec.runs], "created_at": time.time(), "parent_run_id": None}
            atomic_write_json(self.root / SWEEP_FILE, state)
            return state, []
        if state.get("digest") == spec.digest():
            return state, []
        names, recorded = [r.name for r in spec.runs], state.get("runs", [])
        listed = set(names)
        dropped = [n for n in recorded if n not in listed]
        if state.get("kind") != spec.kind or dropped:
            what = f"kind {state.get('kind')} -> {spec.kind}" if state.get("kind") != spec.kind else (
                f"it no longer lists {len(dropped)} of its runs: {', '.join(dropped[:5])}")
            raise ConfigError(
                f"{self.root} holds a different sweep named {spec.name!r} ({what}); a re-issued spec may add "
                "runs but not drop or change them: give the changed sweep a new name, or restore its runs"
            )
        known = set(recorded)
        return state, [n for n in names if n not in known]

    def extend(self, spec: SweepSpec) -> dict[str, Any]:
        """Record a re-issued spec's added runs (after their configs were checked and written)."""
        return self.update(runs=[r.name for r in spec.runs], digest=spec.digest())

    def update(self, **fields: Any) -> dict[str, Any]:
        state = self.read() or {}
        state.update(fields)
        atomic_write_json(self.root / SWEEP_FILE, state)
        return state


def is_finished(kind: str, run: Path, tracked: bool) -> bool:
    if kind == "launch":
        try:
            return read_json(run / "ENDED").get("reason") == "finished"
        except (OSError, ValueError):
            return False
    return (run / RESULT).exists() and (not tracked or (run / MLFLOW_DONE).exists())


def has_result(run: Path) -> bool:
    return (run / RESULT).exists()


def live_job(run: Path) -> str | None:
    """The job id of this run's job from an earlier issue, if Slurm still has it queued or running."""
    try:
        job_id = str(read_json(run / SWEEP_JOB)["job_id"])
    except (OSError, ValueError, KeyError):
        return None
    # squeue (wmrl.slurm.client, which imports the execution layer) only where a run has had a job
    from wmrl.slurm.client import active_tasks

    return job_id if active_tasks([job_id]) else None
