"""What every coordinator-driven trainer keeps besides its step and the loop shell (``wmrl/loop.py``):
measured totals and plots."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from wmrl.calibration.audit import AuditReport
from wmrl.calibration.calibrator import Calibrator
from wmrl.step import PHASES, StepResult
from wmrl.tracking.plots import plot_calibration, plot_curves

CPU_PARTS = ("learner", "execution")  # RunTotals.cpu_seconds: the trainer process's, the executed programs'
MEASURED = ("seconds", "cpu_seconds")  # RunTotals.to_dict()'s accounting: differs between two runs of one config


@dataclass
class RunTotals:
    """Measured totals of a run: executions, world-model calls, seconds and tokens per phase.

    ``seconds`` holds the step's phases (generation, world_model, execution, update) plus whatever the
    trainer measures around the step (weight_sync, io). ``compute_hours`` sums them: on a cluster where
    each phase holds its accelerator, these are its GPU-hours (the anchor workers' time included).

    ``cpu_seconds`` is the same work's CPU time: ``learner``, the trainer process's over the steps (the
    spans whose wall seconds are above: generation, an in-process world model, the update, sync and io;
    not the evaluations), and ``execution``, the executed programs' (measured by their sandboxes; 0 for a
    reused outcome). Wall seconds grow with whatever else shares the machine, CPU seconds do not: on a
    shared CPU machine ``cpu_hours`` is the cost to compare runs by. A world model served by another
    process is not in it (its wall seconds are in ``seconds['world_model']``).
    """

    executions: int = 0
    failed_executions: int = 0
    wm_calls: int = 0
    seconds: dict[str, float] = field(default_factory=lambda: {p: 0.0 for p in PHASES})
    tokens: dict[str, int] = field(default_factory=lambda: {p: 0 for p in PHASES})
    reused_executions: int = 0  # of the executions, an earlier one's outcome (launch.reuse_executions)
    cpu_seconds: dict[str, float] = field(default_factory=lambda: {p: 0.0 for p in CPU_PARTS})

    def charge(self, done: StepResult, extra_seconds: Mapping[str, float] | None = None,
               learner_cpu_seconds: float = 0.0) -> None:
        """Add one step; ``learner_cpu_seconds``: the trainer process's CPU over the step's measured spans."""
        self.cpu_seconds["learner"] += float(learner_cpu_seconds)
        self.cpu_seconds["execution"] += float(done.execution_cpu_seconds)
        for phase, value in {**done.seconds, **(extra_seconds or {})}.items():
            self.seconds[phase] = self.seconds.get(phase, 0.0) + float(value)
        for phase, value in done.tokens.items():
            self.tokens[phase] = self.tokens.get(phase, 0) + int(value)
        self.executions += done.executions
        self.failed_executions += done.failed_executions
        self.reused_executions += done.reused_executions
        self.wm_calls += done.wm_calls

    @property
    def compute_hours(self) -> float:
        return sum(self.seconds.values()) / 3600.0

    @property
    def cpu_hours(self) -> float:
        return sum(self.cpu_seconds.values()) / 3600.0

    def _costs(self) -> dict[str, float]:
        """The wall and CPU totals as metrics and ``progress.json`` name them."""
        return {"compute_hours": self.compute_hours, **{f"seconds_{p}": v for p, v in self.seconds.items()},
                "cpu_hours": self.cpu_hours, **{f"cpu_seconds_{p}": v for p, v in self.cpu_seconds.items()}}

    def as_metrics(self) -> dict[str, float]:
        return {
            "executions": float(self.executions), "failed_executions": float(self.failed_executions),
            "reused_executions": float(self.reused_executions), "wm_calls": float(self.wm_calls), **self._costs(),
            **{f"tokens_{p}": float(v) for p, v in self.tokens.items()},
        }

    def progress(self) -> dict[str, Any]:
        return {"executions": self.executions, "failed_executions": self.failed_executions,
                "reused_executions": self.reused_executions, **self._costs()}

    def to_dict(self) -> dict[str, Any]:
        return {"executions": self.executions, "failed_executions": self.failed_executions,
                "wm_calls": self.wm_calls, "seconds": dict(self.seconds), "tokens": dict(self.tokens),
                "reused_executions": self.reused_executions, "cpu_seconds": dict(self.cpu_seconds)}

    @staticmethod
    def counted(data: Mapping[str, Any]) -> dict[str, Any]:
        """A ``to_dict()`` without the measured seconds (wall and CPU): what two runs of one config share,
        for a state digest (equal digests = bit-identical runs)."""
        return {k: v for k, v in data.items() if k not in MEASURED}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunTotals:
        return cls(int(data["executions"]), int(data["failed_executions"]), int(data["wm_calls"]),
                   dict(data["seconds"]), dict(data["tokens"]),
                   int(data.get("reused_executions", 0)),  # absent from the checkpoints before round 10
                   # absent before round 22: a run resumed from such a checkpoint counts CPU from there on
                   {p: 0.0 for p in CPU_PARTS} | dict(data.get("cpu_seconds") or {}))


def audit_metrics(report: AuditReport | None) -> dict[str, float | None]:
    """What a step's audit adds to its metrics (nothing when the step ran none); undefined numbers None."""
    if report is None:
        return {}
    values = {"audit_ok": float(report.ok), "audit_monotonicity_gain": report.monotonicity_gain,
              "audit_stationarity_gap": report.stationarity_gap}
    return {k: (v if math.isfinite(v) else None) for k, v in values.items()}


def write_run_plots(cfg: Any, calibrator: Calibrator | None, directory: Path, metrics: list[dict[str, Any]],
                    score_curves: Mapping[str, str]) -> list[Path]:
    """calibration.png (anchor pairs and f_hat) and curves.png (the trainer's score curves, rho, eta2)."""
    written = []
    if calibrator is not None and len(calibrator.pool):
        grid = np.linspace(0.0, 1.0, 101)
        predicted, true = calibrator.pool.arrays()
        plot_calibration(predicted, true, grid, calibrator.calibrate(grid), directory / "calibration.png",
                         title=f"{cfg.run_name}: f_hat over {len(predicted)} anchor pairs")
        written.append(directory / "calibration.png")
    if metrics:
        curves = {label: [m.get(key) for m in metrics] for label, key in score_curves.items()}
        curves.update({"rho": [m.get("rho") for m in metrics], "eta2": [m.get("eta2") for m in metrics]})
        plot_curves([m["step"] for m in metrics], curves, directory / "curves.png",
                    hlines={"rho": ("w_max", cfg.algorithm.w_max)}, title=cfg.run_name)
        written.append(directory / "curves.png")
    return written
