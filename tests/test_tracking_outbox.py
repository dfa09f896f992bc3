"""Tracking is best-effort for training: a down store costs seconds, never the run; what was not sent
waits in the run directory and `wmrl sync` sends it exactly once (a real mlflow server on loopback)."""

from __future__ import annotations

import json
import time

import pytest
from mlflow_server import MlflowServer, free_port

from wmrl.config import ConfigError, load_config
from wmrl.tracking.config import TrackingConfig
from wmrl.tracking.outbox import Outbox
from wmrl.tracking.run_tracker import RunTracker, sync_run


def test_outbox_skips_a_torn_last_line_and_keeps_sequence_numbers(tmp_path):
    box = Outbox(tmp_path)
    box.append("metrics", step=1, timestamp_ms=1, values={"a": 1.0})
    with box.journal.open("a") as handle:
        handle.write('{"seq": 1, "kind": "metr')  # a writer killed mid-line
    assert [r["seq"] for r in box.records()] == [0]
    box.mark_sent(0)
    assert box.pending() == []


def test_unknown_tracking_scheme_is_a_config_error_at_load_time():
    with pytest.raises(ConfigError, match="tracking.uri='bogus://x'.*scheme 'bogus'"):
        load_config(None, ["tracking.uri=bogus://x"])


def test_a_down_server_costs_seconds_and_keeps_every_record(tmp_path):
    import mlflow.tracking  # noqa: F401 - importing MLflow takes seconds on a busy machine: not measured

    cfg = TrackingConfig(uri=f"http://127.0.0.1:{free_port()}", retry_every_s=60)
    t0 = time.monotonic()
    with RunTracker(cfg, tmp_path, "r", params={"a": 1}) as tracker:
        for step in range(1, 4):
            tracker.log_metrics({"loss": 1.0 / step}, step=step)
    assert time.monotonic() - t0 < 10  # MLflow alone would retry 7 times with backoff (minutes)
    state = Outbox(tmp_path).state()
    assert state.pending == state.records == 5  # create, 3 x metrics, status
    assert "ConnectionError" in state.last_error and state.failing_since is not None


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = MlflowServer(tmp_path_factory.mktemp("mlflow")).start()
    yield srv
    srv.stop()


def history(uri, run_id, key):
    from mlflow.tracking import MlflowClient

    return [(m.step, m.value) for m in MlflowClient(uri).get_metric_history(run_id, key)]


def test_sync_sends_the_outbox_once_however_often_it_runs(tmp_path, server):
    down = TrackingConfig(uri=f"http://127.0.0.1:{free_port()}")
    with RunTracker(down, tmp_path, "offline-run", params={"algorithm.w_max": 4.0}) as tracker:
        for step in range(1, 4):
            tracker.log_metrics({"loss": 1.0 / step}, step=step)
    up = TrackingConfig(uri=server.uri)
    report = sync_run(tmp_path, up)
    assert (report.sent, report.pending, report.error) == (5, 0, None)
    (tmp_path / "tracking" / "sent.json").write_text(json.dumps({"upto": -1}))  # as if every send was lost
    assert sync_run(tmp_path, up).sent == 5
    from mlflow.tracking import MlflowClient

    run_id = (tmp_path / "mlflow_run_id").read_text().strip()
    run = MlflowClient(server.uri).get_run(run_id)
    assert history(server.uri, run_id, "loss") == [(1, 1.0), (2, 0.5), (3, pytest.approx(1 / 3))]
    assert run.info.status == "FINISHED" and run.data.params["algorithm.w_max"] == "4.0"
    assert Outbox(tmp_path).state().pending == 0
