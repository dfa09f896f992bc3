"""A real `mlflow server` on loopback, started by slurm/mlflow-server.sh: twenty runs logging at once
lose no metric, and a sweep's runs show under its parent run (checked through the REST API)."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from sweep_support import REPO, run_cli, sweep_argv, write_spec

from wmrl.tracking import RunTracker, TrackingConfig

pytestmark = pytest.mark.timeout(1200)
STEPS = 10
KEYS = ("score", "rho", "eta2", "loss")


def _get(uri: str, path: str, body: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(uri + path, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("mlflow")
    env = {**os.environ, "MLFLOW": str(Path(os.sys.executable).parent / "mlflow"), "PYTHON": os.sys.executable}
    with open(root / "server.log", "wb") as log:
        proc = subprocess.Popen(["bash", str(REPO / "slurm" / "mlflow-server.sh"), "--root", str(root),
                                 "--host", "127.0.0.1", "--workers", "2"],
                                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield _wait_up(proc, root)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)


def _wait_up(proc: subprocess.Popen, root: Path) -> str:
    deadline = time.monotonic() + 240  # a loaded 2-core machine takes minutes to import the server
    while not (root / "tracking_uri").exists():
        assert proc.poll() is None and time.monotonic() < deadline, (root / "server.log").read_text()
        time.sleep(0.2)
    uri = (root / "tracking_uri").read_text().strip()
    assert uri in (root / "server.log").read_text()  # the script prints the URI to use
    while True:
        try:
            urllib.request.urlopen(uri + "/health", timeout=5)
            return uri
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, (root / "server.log").read_text()
            time.sleep(0.5)


def _log_one(uri: str, root: Path, i: int, queue: mp.Queue) -> None:
    try:
        # patient: twenty writers on two shared cores; what is tested is that nothing is lost or locked
        cfg = TrackingConfig(uri=uri, experiment="concurrent", request_timeout_s=120, request_retries=2)
        with RunTracker(cfg, root / f"run-{i}", f"run-{i}", params={"i": i}) as tracker:
            for step in range(STEPS):
                tracker.log_metrics({k: i + step / 100 for k in KEYS}, step=step)
        state = tracker.outbox.state()  # a run's tracker never raises: an error would wait here
        queue.put((i, tracker.run_id, state.last_error or (f"{state.pending} records unsent" if state.pending else None)))
    except Exception as err:  # noqa: BLE001 - reported to the test
        queue.put((i, None, repr(err)))


def test_twenty_runs_logging_at_once_lose_no_metric(server: str, tmp_path: Path):
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_log_one, args=(server, tmp_path, i, queue)) for i in range(20)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=900) for _ in procs]  # minutes when the 2 cores are shared
    for p in procs:
        p.join()
    assert [r[2] for r in results if r[2]] == []  # no lock error, no error at all
    for i, run_id, _ in results:
        for key in KEYS:
            hist = _get(server, f"/api/2.0/mlflow/metrics/get-history?run_id={run_id}&metric_key={key}")
            assert sorted(m["step"] for m in hist["metrics"]) == list(range(STEPS))
            assert {m["value"] for m in hist["metrics"]} == {i + s / 100 for s in range(STEPS)}


def test_sweep_runs_show_under_their_parent_through_the_rest_api(server: str, tmp_path: Path):
    spec = write_spec(tmp_path, "name: rest\nkind: simulate\nconfig: configs/simulate.yaml\n"
                                "overrides: [train.steps=20, tracking.experiment=rest-sweep]\nseeds: [0, 1]\n"
                                "groups:\n  - variants: [wmrl]\n    grid: {algorithm.w_max: [1, 8]}\n")
    done = run_cli([*sweep_argv(spec, tmp_path)[:-1], f"tracking.uri={server}"])
    assert done.returncode == 0, done.stderr
    parent = json.loads((tmp_path / "sweeps" / "rest" / "sweep.json").read_text())["parent_run_id"]
    exp = _get(server, "/api/2.0/mlflow/experiments/get-by-name?experiment_name=rest-sweep")["experiment"]
    found = _get(server, "/api/2.0/mlflow/runs/search", {
        "experiment_ids": [exp["experiment_id"]], "filter": f"tags.mlflow.parentRunId = '{parent}'"})["runs"]
    assert sorted(r["info"]["run_name"] for r in found) == [
        f"wmrl_w_max={w}_s{s}" for w in (1, 8) for s in (0, 1)]
    for run in found:
        params = {p["key"]: p["value"] for p in run["data"]["params"]}
        metrics = {m["key"] for m in run["data"]["metrics"]}
        assert params["algorithm.w_max"] in ("1.0", "8.0") and params["train.steps"] == "20"
        assert {"final/score", "final/gpu_hours", "sim/score", "cost/execution_gpu_hours"} <= metrics
    assert _get(server, f"/api/2.0/mlflow/runs/get?run_id={parent}")["run"]["info"]["status"] == "FINISHED"
