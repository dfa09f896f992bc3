"""Best-effort MLflow tracking of a training run: the run never waits long on MLflow and never dies of it.

:class:`RunTracker` has the coordinator's four tracking methods. Each call writes a record to the
run's outbox (:mod:`wmrl.tracking.outbox`) and then tries to send what is pending. A failure (server
down, timeout, SQLite locked) is logged once, shown by ``wmrl status`` and retried at most every
``tracking.retry_every_s``; one attempt costs at most ``tracking.request_timeout_s`` (MLflow's
HTTP retries are set to ``tracking.request_retries``, 0 by default, instead of its 7 with
exponential backoff, which is what held ``wmrl launch`` for four minutes). Whatever is left is sent
by a later call, by a requeued coordinator, or by ``wmrl sync RUN_DIR`` (:func:`sync_run`).

The MLflow run id is kept in ``RUN_DIR/mlflow_run_id``: one wmrl run is one MLflow run however
often it restarts, and a run whose server was down at start gets its MLflow run when it comes back.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Self

from wmrl.io import atomic_write_text
from wmrl.tracking.config import TrackingConfig
from wmrl.tracking.outbox import Outbox
from wmrl.tracking.store import MAX_PARAM_CHARS, experiment_id

log = logging.getLogger(__name__)
MLFLOW_RUN_ID = "mlflow_run_id"
SYNC_TIMEOUT_S = 60
METRICS_PER_REQUEST = 1000  # MLflow's limit on the metrics of one log_batch
# What a run's compute_hours count, for `wmrl compare`'s column names: "GPU" where the coordinator
# holds CUDA devices (each phase then holds its accelerator), "CPU" on a machine without one.
COMPUTE_UNIT_TAG = "wmrl.compute_unit"
# The checkpoint the run started from (the pinned initial policy, with its build hash): runs started
# from different SFT builds are not comparable seed for seed, and `wmrl compare` says so.
INITIAL_POLICY_TAG = "wmrl.initial_policy"


def compute_unit() -> str:
    import torch

    return "GPU" if torch.cuda.is_available() else "CPU"


def configure_mlflow_http(cfg: TrackingConfig) -> None:
    """MLflow reads its HTTP retry/timeout settings from the environment at each request."""
    os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = str(cfg.request_retries)
    os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] = str(cfg.request_timeout_s)


class MlflowSink:
    """Applies outbox records to the run's MLflow run (each one idempotent, see the outbox)."""

    def __init__(self, cfg: TrackingConfig, run_path: Path) -> None:
        from mlflow.tracking import MlflowClient

        configure_mlflow_http(cfg)
        self.cfg = cfg
        self.id_path = Path(run_path) / MLFLOW_RUN_ID
        self.client = MlflowClient(tracking_uri=cfg.uri)

    @property
    def run_id(self) -> str | None:
        try:
            return self.id_path.read_text(encoding="utf-8").strip() or None
        except FileNotFoundError:
            return None

    def send(self, record: dict[str, Any]) -> None:
        from mlflow.entities import RunTag

        kind = record["kind"]
        if kind == "create":
            if self.run_id is None:
                self._create(record)
            return
        run_id = self.run_id
        if run_id is None:
            raise RuntimeError("no MLflow run yet: its 'create' record is missing from the outbox")
        if kind == "resume":
            self.client.update_run(run_id, status="RUNNING")
        elif kind == "metrics":
            self.send_metrics([record])
        elif kind == "tags":
            self.client.log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in sorted(record["tags"].items())])
        elif kind == "artifact":
            if Path(record["path"]).is_file():
                self.client.log_artifact(run_id, record["path"], record.get("artifact_path"))
        elif kind == "status":
            self.client.set_terminated(run_id, status=record["status"])

    def send_metrics(self, records: list[dict[str, Any]]) -> None:
        """Several steps' metrics records in as few requests as MLflow allows (1000 metrics each)."""
        from mlflow.entities import Metric

        run_id = self.run_id
        if run_id is None:
            raise RuntimeError("no MLflow run yet: its 'create' record is missing from the outbox")
        batch = [Metric(k, float(v), int(r["timestamp_ms"]), int(r["step"]))
                 for r in records for k, v in sorted(r["values"].items())]
        for start in range(0, len(batch), METRICS_PER_REQUEST):
            self.client.log_batch(run_id, metrics=batch[start : start + METRICS_PER_REQUEST])

    def _create(self, record: dict[str, Any]) -> None:
        from mlflow.entities import Param

        run = self.client.create_run(experiment_id(self.client, self.cfg), run_name=record["run_name"], tags=record.get("tags") or {})
        atomic_write_text(self.id_path, run.info.run_id + "\n")
        params = [Param(k, str(v)[:MAX_PARAM_CHARS]) for k, v in sorted(record.get("params", {}).items())]
        for start in range(0, len(params), 100):  # MLflow's batch limit on params
            self.client.log_batch(run.info.run_id, params=params[start : start + 100])


@dataclass
class SendReport:
    sent: int
    pending: int
    error: str | None


def _chunks(records: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The records in order, consecutive metrics records grouped up to one request's worth."""
    out: list[list[dict[str, Any]]] = []
    size = 0
    for record in records:
        n = len(record.get("values", ())) if record["kind"] == "metrics" else 0
        last = out[-1] if out else None
        if n and last is not None and last[-1]["kind"] == "metrics" and size + n <= METRICS_PER_REQUEST:
            last.append(record)
            size += n
        else:
            out.append([record])
            size = n
    return out


def send_pending(outbox: Outbox, sink: MlflowSink | None, cfg: TrackingConfig, run_path: Path,
                 failing_since: float | None = None) -> tuple[SendReport, MlflowSink | None]:
    """Send the outbox in order until done or the first failure; record the outcome in state.json."""
    sent, error = 0, None
    pending = outbox.pending()
    try:
        sink = sink or MlflowSink(cfg, run_path)
        for chunk in _chunks(pending):
            if len(chunk) > 1:  # consecutive metrics records: one request (a backlog of steps, a finished run)
                sink.send_metrics(chunk)
            else:
                sink.send(chunk[0])
            sent += len(chunk)
    except Exception as err:  # noqa: BLE001 - any tracking failure must leave training alone
        error = f"{type(err).__name__}: {' '.join(str(err).split())[:300]}"
    if sent:  # once per call, not per record: a crash before it re-sends them, which changes nothing
        outbox.mark_sent(pending[sent - 1]["seq"])
    now = time.time()
    if error:
        outbox.write_state(error, failing_since or now, None)
    elif pending or failing_since:
        outbox.write_state(None, None, now)
    return SendReport(sent, len(pending) - sent, error), sink


class RunTracker:
    """A run's tracker (the coordinator's, ``wmrl train``'s): records go to the outbox first, never raising."""

    def __init__(self, cfg: TrackingConfig, run_path: Path, run_name: str,
                 params: Mapping[str, Any] | None = None, tags: Mapping[str, str] | None = None) -> None:
        self.cfg, self.run_path, self.run_name = cfg, Path(run_path), run_name
        self._params = dict(params or {})
        self._tags = {k: str(v) for k, v in (tags or {}).items()}
        if cfg.parent_run_id:  # a run of a sweep (wmrl sweep): shown under the sweep's parent run
            self._tags.setdefault("mlflow.parentRunId", cfg.parent_run_id)
        self.outbox = Outbox(self.run_path)
        self._sink: MlflowSink | None = None
        self._failing_since: float | None = None
        self._retry_at = 0.0
        self.final_status = "FINISHED"  # KILLED when the run was cancelled

    @property
    def run_id(self) -> str | None:
        return self._sink.run_id if self._sink is not None else None

    def __enter__(self) -> Self:
        if self.cfg.enabled:
            if self.outbox.has("create"):
                self.outbox.append("resume")
            else:
                self.outbox.append("create", run_name=self.run_name, params=self._params, tags=self._tags)
            self.flush()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if self.cfg.enabled:
            self.outbox.append("status", status="FAILED" if exc_type else self.final_status)
            self.flush(force=True)

    def log_metrics(self, metrics: Mapping[str, float], step: int, timestamp_ms: int | None = None) -> None:
        if not self.cfg.enabled:
            return
        values = {k: float(v) for k, v in metrics.items() if v is not None and math.isfinite(float(v))}
        self.outbox.append("metrics", step=int(step), timestamp_ms=timestamp_ms or int(time.time() * 1000),
                           values=values)
        self.flush()

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        if self.cfg.enabled:
            self.outbox.append("artifact", path=str(Path(path).absolute()), artifact_path=artifact_path)
            self.flush()

    def set_tags(self, tags: Mapping[str, str]) -> None:
        if self.cfg.enabled:
            self.outbox.append("tags", tags={k: str(v) for k, v in tags.items()})
            self.flush()

    def flush(self, force: bool = False) -> SendReport | None:
        """Send what is pending, unless the store failed less than ``retry_every_s`` ago."""
        if not force and time.monotonic() < self._retry_at:
            return None
        report, self._sink = send_pending(self.outbox, self._sink, self.cfg, self.run_path, self._failing_since)
        if report.error:
            if self._failing_since is None:
                log.warning("tracking store %s unreachable (%s); %d record(s) kept in %s, retried every %.0f s "
                            "(or `wmrl sync %s`)", self.cfg.uri, report.error, report.pending,
                            self.outbox.directory, self.cfg.retry_every_s, self.run_path)
                self._failing_since = time.time()
            self._retry_at = time.monotonic() + self.cfg.retry_every_s
        elif self._failing_since is not None:
            log.info("tracking store %s reachable again; outbox sent", self.cfg.uri)
            self._failing_since = None
        return report


def sync_run(run_path: Path, cfg: TrackingConfig) -> SendReport:
    """Send a run's outbox (``wmrl sync RUN_DIR``; also what sweeps use to complete their runs).

    No training waits on this: a busy server gets up to a minute per request and two retries.
    """
    outbox = Outbox(run_path)
    patient = replace(cfg, request_timeout_s=max(cfg.request_timeout_s, SYNC_TIMEOUT_S),
                      request_retries=max(cfg.request_retries, 2))
    report, _ = send_pending(outbox, None, patient, Path(run_path), outbox.state().failing_since)
    return report
