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

    def open(self, spec: SweepSpec) -> dict[str, Any]:
        """Create the sweep's record, or check that a re-issued sweep is the same sweep."""
        state = self.read()
        if state is not None:
            if state.get("digest") != spec.digest():
                raise ConfigError(
                    f"{self.root} holds a different sweep named {spec.name!r} (its runs or overrides "
                    "changed); give the changed sweep a new name, or restore the spec it was issued with"
                )
            return state
        self.runs.mkdir(parents=True, exist_ok=True)
        state = {"name": spec.name, "kind": spec.kind, "digest": spec.digest(), "spec": spec.source,
                 "runs": [r.name for r in spec.runs], "created_at": time.time(), "parent_run_id": None}
        atomic_write_json(self.root / SWEEP_FILE, state)
        return state

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
