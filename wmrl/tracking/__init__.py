"""Run tracking (MLflow), through each run's outbox (``RUN_DIR/tracking/``)."""

from wmrl.tracking.config import TrackingConfig
from wmrl.tracking.run_tracker import RunTracker, sync_run

__all__ = ["RunTracker", "TrackingConfig", "sync_run"]
