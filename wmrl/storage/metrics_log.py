"""``RUN_DIR/metrics.jsonl``: one row per step, whatever restarts happened.

A coordinator that resumes from the checkpoint of step k replays the steps after k that its
predecessor had already logged. A replayed step that reproduces its row (the trainer is
deterministic from a checkpoint; only its wall time differs) is not logged again, neither here nor
in MLflow. One that differs replaces its row here and is logged to MLflow with the row's original
timestamp (MLflow cannot delete a metric row: the run then holds both values at that step, which
the ``replay_differs`` event in ``logs/coordinator-events.jsonl`` records).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from wmrl.io import append_line_durable, atomic_write_text
from wmrl.resources import KEYS as MEMORY_KEYS

METRICS = "metrics.jsonl"
# Keys measured by the clock or the OS, not computed by training: they may differ on a faithful replay.
WALL_CLOCK_KEYS = frozenset({"step_seconds", "timestamp_ms", *MEMORY_KEYS})


def read_rows(path: Path) -> dict[int, dict[str, Any]]:
    """``{step: row}``, the last row of each step (a torn last line is skipped)."""
    rows: dict[int, dict[str, Any]] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return rows
    for line in lines:
        try:
            row = json.loads(line)
            rows[int(row["step"])] = row
        except (ValueError, KeyError, TypeError):
            continue
    return rows


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


class MetricsLog:
    def __init__(self, run_path: Path) -> None:
        self.path = Path(run_path) / METRICS
        self.rows = read_rows(self.path)
        if self.rows and sum(1 for _ in self.path.open(encoding="utf-8")) != len(self.rows):
            self._rewrite()  # a file written before rows were keyed by step: compact it once

    def record(self, step: int, metrics: dict[str, Any]) -> tuple[str, int]:
        """Log ``step``'s metrics; returns (what happened: new | replayed | replaced, timestamp_ms)."""
        old = self.rows.get(step)
        if old is None:
            row = {"step": step, "timestamp_ms": int(time.time() * 1000), **metrics}
            self.rows[step] = row
            append_line_durable(self.path, json.dumps(row, sort_keys=True))
            return "new", row["timestamp_ms"]
        keys = (set(old) | set(metrics)) - WALL_CLOCK_KEYS - {"step"}
        if all(_same(old.get(k), metrics.get(k)) for k in keys):
            return "replayed", int(old.get("timestamp_ms", 0))
        row = {"step": step, "timestamp_ms": int(old.get("timestamp_ms") or time.time() * 1000), **metrics}
        self.rows[step] = row
        self._rewrite()
        return "replaced", row["timestamp_ms"]

    def ordered(self) -> list[dict[str, Any]]:
        return [self.rows[k] for k in sorted(self.rows)]

    def _rewrite(self) -> None:
        atomic_write_text(self.path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in self.ordered()))
