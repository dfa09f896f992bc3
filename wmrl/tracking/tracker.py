"""MLflow run tracking behind a four-method object.

One ``Tracker`` is one MLflow run. It talks to MLflow through an explicit ``MlflowClient`` (no
global "active run"), so several trackers can live in one process and a requeued coordinator can
reattach to its run by id. With ``enabled=False`` every method is a no-op, so callers never branch.

SQLite stores are safe with one writer at a time: processes that run in parallel should hand their
metrics to one parent that logs them (as ``wmrl simulate`` does), or use a tracking server.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from wmrl.tracking.config import TrackingConfig

_MAX_PARAM_CHARS = 6000  # MLflow's limit on a param value


def _artifact_root(cfg: TrackingConfig) -> str | None:
    """Artifacts of a SQLite store sit next to the database file, not in whatever the cwd is."""
    if cfg.artifact_location:
        return cfg.artifact_location
    if cfg.uri.startswith("sqlite:///"):
        db = Path(cfg.uri[len("sqlite:///") :]).resolve()
        return (db.parent / "mlartifacts").as_uri()
    return None  # a tracking server decides


def experiment_id(client: Any, cfg: TrackingConfig) -> str:
    """The experiment's id, created if missing. Many runs starting at once (a sweep's coordinators)
    race to create it: the losers get RESOURCE_ALREADY_EXISTS and read the winner's."""
    from mlflow.exceptions import MlflowException

    experiment = client.get_experiment_by_name(cfg.experiment)
    if experiment is not None:
        return str(experiment.experiment_id)
    try:
        return str(client.create_experiment(cfg.experiment, artifact_location=_artifact_root(cfg)))
    except MlflowException as err:
        if err.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
        return str(client.get_experiment_by_name(cfg.experiment).experiment_id)


class Tracker:
    def __init__(
        self,
        cfg: TrackingConfig,
        run_name: str,
        params: Mapping[str, Any] | None = None,
        tags: Mapping[str, str] | None = None,
        resume_run_id: str | None = None,
    ) -> None:
        self.cfg = cfg
        self.run_name = run_name
        self._params = dict(params or {})
        self._tags = {k: str(v) for k, v in (tags or {}).items()}
        if cfg.parent_run_id:
            self._tags.setdefault("mlflow.parentRunId", cfg.parent_run_id)
        self._resume_run_id = resume_run_id
        self._client: Any = None
        self.run_id: str | None = None

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> Tracker:
        if not self.cfg.enabled:
            return self
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        self._client = MlflowClient(tracking_uri=self.cfg.uri)
        if self._resume_run_id is not None:
            self.run_id = self._resume_run_id
            self._client.update_run(self.run_id, status="RUNNING")
            return self
        run = self._client.create_run(experiment_id(self._client, self.cfg), run_name=self.run_name, tags=self._tags)
        self.run_id = run.info.run_id
        params = [Param(k, str(v)[:_MAX_PARAM_CHARS]) for k, v in sorted(self._params.items())]
        for start in range(0, len(params), 100):  # MLflow's batch limit on params
            self._client.log_batch(self.run_id, params=params[start : start + 100])
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._client is not None and self.run_id is not None:
            self._client.set_terminated(self.run_id, status="FAILED" if exc_type else "FINISHED")

    # ------------------------------------------------------------------ logging
    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self._log_batch([(key, value, step) for key, value in metrics.items()])

    def log_history(self, history: Mapping[str, list[float]], steps: list[int]) -> None:
        """Log whole per-step curves at once (for results computed in another process)."""
        self._log_batch([(key, values[i], step) for key, values in history.items() for i, step in enumerate(steps)])

    def _log_batch(self, rows: list[tuple[str, float | None, int]]) -> None:
        if self._client is None:
            return
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [
            Metric(key, float(value), now, int(step))
            for key, value, step in rows
            if value is not None and math.isfinite(float(value))
        ]
        for start in range(0, len(batch), 1000):  # MLflow's batch limit on metrics
            self._client.log_batch(self.run_id, metrics=batch[start : start + 1000])

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        if self._client is not None:
            self._client.log_artifact(self.run_id, str(path), artifact_path)

    def set_tags(self, tags: Mapping[str, str]) -> None:
        if self._client is not None:
            for key, value in tags.items():
                self._client.set_tag(self.run_id, key, str(value))
