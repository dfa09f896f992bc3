"""Tracking of finished simulator runs through the outbox every wmrl run uses (:mod:`wmrl.tracking.outbox`).

A simulator run is computed whole in a pool process, so all its records are known at once: they are
written to ``RUN_DIR/tracking/outbox.jsonl`` in one atomic write (the run's tracking is there completely
or not at all), then sent like a training run's records. ``wmrl sync RUN_DIR`` sends what a down server
missed; sending twice changes nothing. The records are the coordinator's kinds: ``create`` (the resolved
config as flat dotted params, tags), one ``metrics`` record per logged step (``sim/score``,
``sim/gpu_hours``, ``sim/rho``, ...), the final figures ``wmrl compare`` reads (``final/*``,
``cost/<phase>_gpu_hours``), the artifacts and the status.

Only the process that holds the results writes and sends (the parent of the pool): a SQLite store has
one writer.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from wmrl.config_io import to_flat_dict, to_yaml
from wmrl.io import atomic_write_text
from wmrl.simulate.config import TestbedRunConfig
from wmrl.simulate.simulator import audit_warned
from wmrl.tracking.outbox import DIRECTORY, Outbox
from wmrl.tracking.run_tracker import MLFLOW_RUN_ID, SendReport, send_pending


def final_metrics(result: Mapping[str, Any]) -> dict[str, float | None]:
    """The run's closing figures, as ``wmrl compare`` reads them back from MLflow."""
    hist = result.get("history", {})
    out: dict[str, float | None] = {
        "final/score": result["final_score"],
        "final/gpu_hours": result["gpu_hours"],
        "final/executions": float(result["executions"]),
        "final/rho": (hist.get("rho") or [None])[-1],
        "final/eta2": (hist.get("eta2") or [None])[-1],
        "final/audit_warned": float(audit_warned(result.get("audit"))) if result.get("audit") else None,
    }
    for phase, seconds in (result.get("phase_seconds") or {}).items():
        out[f"cost/{phase}_gpu_hours"] = seconds / 3600.0
    return out


def _finite(values: Mapping[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in values.items() if v is not None and math.isfinite(float(v))}


def run_records(result: Mapping[str, Any], cfg: TestbedRunConfig, run_name: str, tags: Mapping[str, str],
                artifacts: Sequence[tuple[Path, str | None]] = (), timestamp_ms: int | None = None,
                ) -> list[tuple[str, dict[str, Any]]]:
    """Every tracking record of one finished run (``result``: a RunResult as a dict; ``cfg``: the run's
    config, logged as flat dotted params; a sweep's run names its parent run there), in order."""
    now = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    history, steps = result["history"], result["steps"]
    tags = {k: str(v) for k, v in tags.items()}
    if cfg.tracking.parent_run_id:
        tags.setdefault("mlflow.parentRunId", cfg.tracking.parent_run_id)
    records: list[tuple[str, dict[str, Any]]] = [
        ("create", {"run_name": run_name, "params": to_flat_dict(cfg), "tags": tags}),
    ]
    for i, step in enumerate(steps):
        values = _finite({f"sim/{key}": series[i] for key, series in history.items()})
        if i == len(steps) - 1:
            values.update(_finite(final_metrics(result)))
        records.append(("metrics", {"step": int(step), "timestamp_ms": now, "values": values}))
    records += [("artifact", {"path": str(Path(p).absolute()), "artifact_path": where}) for p, where in artifacts]
    records.append(("status", {"status": "FINISHED"}))
    return records


def prepare_run_dir(run_dir: Path, cfg: TestbedRunConfig) -> None:
    """Write the run's resolved ``config.yaml`` (what ``wmrl sync`` reads) and drop the tracking files of
    an earlier invocation there (written by this module: a new invocation is a new MLflow run)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    for name in ("outbox.jsonl", "sent.json", "state.json"):
        (run_dir / DIRECTORY / name).unlink(missing_ok=True)
    (run_dir / MLFLOW_RUN_ID).unlink(missing_ok=True)
    atomic_write_text(run_dir / "config.yaml", to_yaml(replace(cfg, tracking=cfg.tracking.absolute())))


def write_run(run_dir: Path, cfg: TestbedRunConfig, result: Mapping[str, Any], run_name: str, tags: Mapping[str, str],
              artifacts: Sequence[tuple[Path, str | None]] = ()) -> None:
    """Write the run's whole outbox (``cfg``: the run's config, variant and seed set; the directory was
    prepared with :func:`prepare_run_dir`)."""
    Outbox(run_dir).extend(run_records(result, cfg, run_name, tags, [(run_dir / "config.yaml", None), *artifacts]))


def send_runs(run_dirs: Sequence[Path], cfg: TestbedRunConfig) -> tuple[int, SendReport | None]:
    """Send the outboxes in order; stop at the first failure (a down store would fail them all).
    Returns how many runs were sent completely and the failure's report (None: all sent)."""
    for done, run_dir in enumerate(run_dirs):
        report, _ = send_pending(Outbox(run_dir), None, cfg.tracking, run_dir)
        if report.error:
            return done, report
    return len(run_dirs), None
