"""Config section ``tracking``: MLflow run tracking."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from wmrl.config_checks import ConfigError, Section, in_range

# Stores MLflow's client opens (database URIs may name a driver: postgresql+psycopg2://).
SCHEMES = ("sqlite", "postgresql", "mysql", "mssql", "http", "https", "file", "databricks")


@dataclass
class TrackingConfig(Section):
    KEY: ClassVar[str] = "tracking"
    enabled: bool = True
    # One SQLite writer per run is safe; several concurrent runs on NFS want a tracking server.
    uri: str = "sqlite:///mlflow.db"
    experiment: str = "wmrl"
    # Where a new experiment stores artifacts; "" = next to a SQLite database, or the server's default.
    artifact_location: str = ""
    # Tracking is best-effort for training (wmrl/tracking/run_tracker.py): one request waits at most
    # request_timeout_s, is retried request_retries times by MLflow, and after a failure the store is
    # tried again only every retry_every_s; what could not be sent waits in RUN_DIR/tracking/.
    request_timeout_s: int = field(default=5, metadata=in_range(1))
    request_retries: int = field(default=0, metadata=in_range(0))
    retry_every_s: float = field(default=60.0, metadata=in_range(0.0))
    # MLflow run id of a parent run ("" = none): set by `wmrl sweep`, so each run of a sweep shows
    # under the sweep's parent run (tag mlflow.parentRunId).
    parent_run_id: str = ""

    def absolute(self) -> TrackingConfig:
        """The same config with a relative ``sqlite:///`` path made absolute (for jobs whose cwd differs)."""
        from dataclasses import replace
        from pathlib import Path

        if self.uri.startswith("sqlite:///") and not self.uri.startswith("sqlite:////"):
            return replace(self, uri="sqlite:///" + str(Path(self.uri[len("sqlite:///") :]).resolve()))
        return self

    def check_together(self, prefix: str) -> None:
        scheme = self.uri.split(":", 1)[0].split("+", 1)[0] if ":" in self.uri else ""
        if self.enabled and scheme not in SCHEMES:
            raise ConfigError(
                f"{prefix}.uri={self.uri!r} is not a tracking URI MLflow can open (scheme {scheme or '(none)'!r}); "
                f"use one of {', '.join(SCHEMES)}, e.g. sqlite:///mlflow.db or http://host:5000"
            )
        if self.enabled and not self.experiment:
            raise ConfigError(f"{prefix}.experiment must be a non-empty name")
