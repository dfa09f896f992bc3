"""The MLflow tracker logs into a real local SQLite store."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from wmrl.config import ConfigError, load_config
from wmrl.tracking import Tracker, TrackingConfig


@pytest.fixture
def store(tmp_path: Path) -> TrackingConfig:
    return TrackingConfig(uri=f"sqlite:///{tmp_path / 'mlflow.db'}", experiment="test")


def test_tracker_logs_params_metric_history_and_artifacts(store: TrackingConfig, tmp_path: Path) -> None:
    plot = tmp_path / "curve.png"
    plot.write_bytes(b"not really a png")
    with Tracker(store, "run-a", params={"algorithm.w_max": 4.0}, tags={"variant": "wmrl"}) as tracker:
        for step in range(3):
            tracker.log_metrics({"score": 0.25 * step, "rho": float("nan")}, step=step)
        tracker.log_artifact(plot, "plots")
    client = MlflowClient(store.uri)
    run = client.get_run(tracker.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params == {"algorithm.w_max": "4.0"}
    assert run.data.tags["variant"] == "wmrl"
    assert [m.value for m in client.get_metric_history(tracker.run_id, "score")] == [0.0, 0.25, 0.5]
    assert "rho" not in run.data.metrics  # non-finite values are dropped, not logged as garbage
    assert [a.path for a in client.list_artifacts(tracker.run_id, "plots")] == ["plots/curve.png"]
    assert (tmp_path / "mlartifacts").is_dir()  # artifacts live beside the database


def test_tracker_marks_run_failed_on_exception(store: TrackingConfig) -> None:
    with pytest.raises(RuntimeError), Tracker(store, "run-b") as tracker:
        raise RuntimeError("boom")
    assert MlflowClient(store.uri).get_run(tracker.run_id).info.status == "FAILED"


def test_tracker_resumes_an_existing_run(store: TrackingConfig) -> None:
    with Tracker(store, "run-c") as first:
        first.log_metrics({"step": 1.0}, step=1)
    with Tracker(store, "ignored", resume_run_id=first.run_id) as second:
        second.log_metrics({"step": 2.0}, step=2)
    history = MlflowClient(store.uri).get_metric_history(first.run_id, "step")
    assert [m.step for m in history] == [1, 2]


def test_disabled_tracker_writes_nothing(tmp_path: Path) -> None:
    cfg = TrackingConfig(enabled=False, uri=f"sqlite:///{tmp_path / 'none.db'}")
    with Tracker(cfg, "off") as tracker:
        tracker.log_metrics({"x": 1.0}, step=0)
    assert tracker.run_id is None
    assert not (tmp_path / "none.db").exists()


def test_bad_tracking_uri_is_rejected_at_load() -> None:
    with pytest.raises(ConfigError, match="tracking.uri"):
        load_config(None, ["tracking.uri=mlflow.db"])
