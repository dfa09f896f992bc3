"""The MLflow store of a run: its experiment (created on first use) and where a SQLite store keeps artifacts.

Runs write to MLflow only through their outbox (:mod:`wmrl.tracking.run_tracker`), with an explicit
``MlflowClient`` (no global "active run"). SQLite stores are safe with one writer at a time: processes
that run in parallel hand their results to one parent that logs them (as ``wmrl simulate`` and
``wmrl sweep`` do), or use a tracking server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from wmrl.tracking.config import TrackingConfig

MAX_PARAM_CHARS = 6000  # MLflow's limit on a param value


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
