"""Config section ``tracking``: MLflow run tracking."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TrackingConfig:
    enabled: bool = True
    # One SQLite writer per run is safe; several concurrent runs on NFS want a tracking server.
    uri: str = "sqlite:///mlflow.db"
    experiment: str = "wmrl"

    def validate(self, prefix: str = "tracking") -> None:
        pass
