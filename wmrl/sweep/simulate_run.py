"""One ``simulate`` run of a sweep: compute it (in a pool process or a Slurm job), then log it.

Computing and logging are apart on purpose: the computing process only writes ``result.json`` in the
run directory; the sweep driver, one process, logs finished results to MLflow. A SQLite store then
has exactly one writer however many runs compute at once, and a run killed after computing is
logged on the next issue without being computed again.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from wmrl.config import WMRLConfig, load_config, to_flat_dict
from wmrl.io import atomic_write_json, atomic_write_text, read_json
from wmrl.simulate.report import _json_safe
from wmrl.sweep.state import MLFLOW_DONE, MLFLOW_PENDING, RESULT


def compute(run_dir: str, cfg: WMRLConfig | None = None) -> str:
    """Train the run whose ``config.yaml`` is in ``run_dir`` (``cfg``: that config, already loaded);
    write ``result.json``. Returns ``run_dir``."""
    from wmrl.trainers.simulator import train

    cfg = cfg or load_config(Path(run_dir) / "config.yaml")
    # The audit's verdict is in the result; its log lines would break the sweep's progress bar.
    logging.getLogger("wmrl.calibration").setLevel(logging.ERROR)
    result = train(cfg, cfg.algorithm.variant, cfg.algorithm.seed)
    data = dataclasses.asdict(result)
    data.pop("pool_sample", None)  # plots of a single run are not what a sweep keeps
    atomic_write_json(Path(run_dir) / RESULT, _json_safe(data))
    return run_dir


def final_metrics(result: dict[str, Any]) -> dict[str, float | None]:
    """The run's closing figures, as ``wmrl compare`` reads them back from MLflow."""
    from wmrl.trainers.simulator import _audit_warned

    hist = result.get("history", {})
    out: dict[str, float | None] = {
        "final/score": result["final_score"],
        "final/gpu_hours": result["gpu_hours"],
        "final/executions": float(result["executions"]),
        "final/rho": (hist.get("rho") or [None])[-1],
        "final/eta2": (hist.get("eta2") or [None])[-1],
        "final/audit_warned": float(_audit_warned(result.get("audit"))) if result.get("audit") else None,
    }
    for phase, seconds in (result.get("phase_seconds") or {}).items():
        out[f"cost/{phase}_gpu_hours"] = seconds / 3600.0
    return out


def log_run(run_dir: Path, sweep_name: str, cfg: WMRLConfig | None = None) -> str | None:
    """Log a computed run as an MLflow child run of the sweep (the config names the parent).

    A child left half-logged by a killed driver (its id in ``mlflow_run_id``, no ``mlflow.json``) was
    created by this code: it is deleted (MLflow keeps it restorable) and logged again, so no metric
    is ever counted twice."""
    from wmrl.tracking import Tracker

    cfg = cfg or load_config(run_dir / "config.yaml")
    if not cfg.tracking.enabled:
        return None
    result = read_json(run_dir / RESULT)
    pending = run_dir / MLFLOW_PENDING
    if pending.exists():
        from mlflow.tracking import MlflowClient

        MlflowClient(cfg.tracking.uri).delete_run(pending.read_text().strip())
    tags = {"wmrl.kind": "simulate", "wmrl.sweep": sweep_name, "wmrl.variant": cfg.algorithm.variant,
            "wmrl.run_dir": str(run_dir)}
    with Tracker(cfg.tracking, cfg.run_name, params=to_flat_dict(cfg), tags=tags) as tracker:
        atomic_write_text(pending, f"{tracker.run_id}\n")
        tracker.log_history({f"sim/{k}": v for k, v in result["history"].items()}, result["steps"])
        tracker.log_metrics({k: v for k, v in final_metrics(result).items() if v is not None},
                            step=result["steps"][-1])
        tracker.log_artifact(run_dir / "config.yaml")
    atomic_write_json(run_dir / MLFLOW_DONE, {"run_id": tracker.run_id})
    pending.unlink()
    return tracker.run_id
