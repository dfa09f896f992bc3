"""A run's tracker logs into a real local SQLite store, through the run's outbox."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from wmrl.config import ConfigError, load_config
from wmrl.tracking import RunTracker, TrackingConfig
from wmrl.tracking.outbox import Outbox
from wmrl.tracking.run_tracker import sync_run


@pytest.fixture
def store(tmp_path: Path) -> TrackingConfig:
    return TrackingConfig(uri=f"sqlite:///{tmp_path / 'mlflow.db'}", experiment="test")


def test_tracker_logs_params_metric_history_and_artifacts(store: TrackingConfig, tmp_path: Path) -> None:
    plot = tmp_path / "curve.png"
    plot.write_bytes(b"not really a png")
    with RunTracker(store, tmp_path / "run", "run-a", params={"algorithm.w_max": 4.0},
                    tags={"variant": "wmrl"}) as tracker:
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


def test_tracker_marks_run_failed_on_exception(store: TrackingConfig, tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), RunTracker(store, tmp_path, "run-b") as tracker:
        raise RuntimeError("boom")
    assert MlflowClient(store.uri).get_run(tracker.run_id).info.status == "FAILED"


def test_many_steps_sent_at_once_keep_every_point(store: TrackingConfig, tmp_path: Path) -> None:
    """A backlog of metrics records (a finished run, a server that came back) goes in few requests."""
    box = Outbox(tmp_path)
    box.extend([("create", {"run_name": "backlog", "params": {}, "tags": {}}),
                *[("metrics", {"step": s, "timestamp_ms": 1000 + s, "values": {f"k{j}": s + j / 10 for j in range(30)}})
                  for s in range(50)],
                ("status", {"status": "FINISHED"})])
    assert sync_run(tmp_path, store).error is None
    run_id = (tmp_path / "mlflow_run_id").read_text().strip()
    client = MlflowClient(store.uri)
    for j in (0, 29):
        assert [(m.step, m.value) for m in client.get_metric_history(run_id, f"k{j}")] == \
            [(s, s + j / 10) for s in range(50)]
    assert sync_run(tmp_path, store).sent == 0  # nothing sent twice


def test_a_new_outbox_written_with_extend_is_whole(tmp_path: Path) -> None:
    box = Outbox(tmp_path)
    assert box.extend([("create", {"run_name": "r", "params": {}, "tags": {}}),
                       ("status", {"status": "FINISHED"})]) == [0, 1]
    assert [r["kind"] for r in Outbox(tmp_path).records()] == ["create", "status"]
    assert [p.name for p in box.directory.iterdir()] == ["outbox.jsonl"]  # no temp file left


def test_disabled_tracker_writes_nothing(tmp_path: Path) -> None:
    cfg = TrackingConfig(enabled=False, uri=f"sqlite:///{tmp_path / 'none.db'}")
    with RunTracker(cfg, tmp_path / "run", "off") as tracker:
        tracker.log_metrics({"x": 1.0}, step=0)
    assert tracker.run_id is None
    assert not (tmp_path / "none.db").exists() and not (tmp_path / "run").exists()


def test_bad_tracking_uri_is_rejected_at_load() -> None:
    with pytest.raises(ConfigError, match="tracking.uri"):
        load_config(None, ["tracking.uri=mlflow.db"])
