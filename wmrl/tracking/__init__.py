"""Run tracking (MLflow)."""

from wmrl.tracking.config import TrackingConfig
from wmrl.tracking.tracker import Tracker

__all__ = ["Tracker", "TrackingConfig"]
