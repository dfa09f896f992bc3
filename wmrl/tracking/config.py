"""Config section ``tracking``: MLflow run tracking."""

from __future__ import annotations

from dataclasses import dataclass

from wmrl.config_checks import ConfigError


@dataclass
class TrackingConfig:
    enabled: bool = True
    # One SQLite writer per run is safe; several concurrent runs on NFS want a tracking server.
    uri: str = "sqlite:///mlflow.db"
    experiment: str = "wmrl"
    # Where a new experiment stores artifacts; "" = next to a SQLite database, or the server's default.
    artifact_location: str = ""

    def absolute(self) -> TrackingConfig:
        """The same config with a relative ``sqlite:///`` path made absolute (for jobs whose cwd differs)."""
        from dataclasses import replace
        from pathlib import Path

        if self.uri.startswith("sqlite:///") and not self.uri.startswith("sqlite:////"):
            return replace(self, uri="sqlite:///" + str(Path(self.uri[len("sqlite:///") :]).resolve()))
        return self

    def validate(self, prefix: str = "tracking") -> None:
        if self.enabled and "://" not in self.uri and not self.uri.startswith("file:"):
            raise ConfigError(
                f"{prefix}.uri={self.uri!r} is not a tracking URI; use e.g. sqlite:///mlflow.db or http://host:5000"
            )
        if self.enabled and not self.experiment:
            raise ConfigError(f"{prefix}.experiment must be a non-empty name")
