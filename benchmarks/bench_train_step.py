"""Benchmark: where a `wmrl train` step's time goes, and the coordinator's peak memory, from a finished run.

It reads what the run recorded (nothing is re-run): each step's row of ``RUN_DIR/metrics.jsonl`` holds the
step's wall seconds (``step_seconds``, measured by the coordinator around the trainer's step) and its
seconds per phase (``wmrl.trainers.llm.names.STEP_PHASE_KEYS``: generation, world model, execution, update,
weight sync, I/O, and the evaluation and learner checkpoint that some steps include); ``other`` is the rest
of the step (choosing anchors, calibration, scoring, bookkeeping). Peak memory: the coordinator process's
peak resident set (``peak_rss_mb``, getrusage) and its largest ended child process, the largest over the
run's steps, and the learner's own peak over its update (``learner/peak_memory_mb``).

Phase seconds are summed over a step's trajectories (each records its own): where trajectories run
concurrently (world-model calls to a served endpoint, executions on several workers) a phase can
exceed its share of the wall clock; the shares are of the mean step time, as recorded.

    python benchmarks/bench_train_step.py --run-dir RUN_DIR [--out results/train] [--note TEXT]

Writes OUT/step_breakdown.json and OUT/step_breakdown.md (mean ± standard error over the run's steps).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
MEMORY = ("peak_rss_mb", "peak_rss_children_mb", "learner/peak_memory_mb")


def mean_se(values: list[float]) -> tuple[float, float]:
    """Mean and its standard error (NaN with fewer than 2 values)."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return math.nan, math.nan
    return float(x.mean()), float(x.std(ddof=1) / math.sqrt(x.size)) if x.size > 1 else math.nan


def breakdown(run_dir: Path) -> dict[str, Any]:
    """Per-phase mean ± s.e. over the run's steps, the share of the mean step, and the memory peaks."""
    from wmrl.config import load_config
    from wmrl.storage.metrics_log import METRICS, read_rows
    from wmrl.trainers.llm.names import STEP_PHASE_KEYS

    rows = [r for _, r in sorted(read_rows(run_dir / METRICS).items())]
    if not rows:
        raise SystemExit(f"bench_train_step: {run_dir / METRICS} has no step rows; is {run_dir} a wmrl run?")
    missing = [key for key in ("step_seconds", *STEP_PHASE_KEYS.values()) if key not in rows[-1]]
    if missing:
        raise SystemExit(f"bench_train_step: {run_dir / METRICS} lacks {', '.join(missing)}: not a `wmrl train` "
                         "(trainer: llm) run, or one recorded before these keys existed")
    step = [float(r["step_seconds"]) for r in rows]
    per_phase = {phase: [float(r.get(key) or 0.0) for r in rows] for phase, key in STEP_PHASE_KEYS.items()}
    per_phase["other"] = [s - sum(v[i] for v in per_phase.values()) for i, s in enumerate(step)]
    step_mean, step_se = mean_se(step)
    phases = {}
    for phase, values in per_phase.items():
        mean, se = mean_se(values)
        phases[phase] = {"mean_s": mean, "se_s": se, "share": mean / step_mean if step_mean > 0 else math.nan}
    cfg = load_config(run_dir / "config.yaml")
    memory = {key: max((float(r[key]) for r in rows if r.get(key) is not None), default=None) for key in MEMORY}
    return {
        "run_dir": str(run_dir), "steps": len(rows), "step_seconds": {"mean_s": step_mean, "se_s": step_se},
        "phases": phases, "peak_memory_mb": memory,
        "config": {"variant": cfg.algorithm.variant, "groups_per_step": cfg.algorithm.groups_per_step,
                   "group_size": cfg.algorithm.group_size, "max_turns": cfg.agent.max_turns,
                   "max_new_tokens": cfg.sampling.max_new_tokens, "model": cfg.model.path or "tiny default",
                   "executor": cfg.launch.executor, "workers": cfg.launch.workers},
        "host": {"machine": platform.machine(), "python": platform.python_version()},
    }


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def markdown(result: dict[str, Any], command: str, note: str) -> str:
    step = result["step_seconds"]
    lines = [
        "# `wmrl train` step-time breakdown and coordinator peak memory",
        "",
        f"Run `{result['run_dir']}`: {result['steps']} steps, config {json.dumps(result['config'])}.",
        f"Reproduce: `{command}`" + (f". {note}" if note else ""),
        "",
        f"Mean step: {_num(step['mean_s'], '.2f')} ± {_num(step['se_s'], '.2f')} s (mean ± s.e. over steps).",
        "",
        "| phase | mean s/step | s.e. | share of the step |",
        "| --- | ---: | ---: | ---: |",
    ]
    for phase, p in result["phases"].items():
        lines.append(f"| {phase} | {_num(p['mean_s'], '.3f')} | {_num(p['se_s'], '.3f')} | "
                     f"{_num(100 * p['share'], '.1f')} % |")
    mem = result["peak_memory_mb"]
    lines += [
        "",
        ("Phase seconds are summed over the step's trajectories; `other` is the step's wall time minus the "
         "phases (anchor choice, calibration, scoring, bookkeeping). `evaluation` and `checkpoint` fall only "
         "in the steps that evaluate or save."
         + (" Here `other` is negative: phases overlapped, e.g. the workers ran an anchor group's executions "
            "side by side, so their summed seconds exceed the wall time they took."
            if result["phases"]["other"]["mean_s"] < 0 else "")),
        "",
        "| peak memory | MB |",
        "| --- | ---: |",
        f"| coordinator process (peak RSS) | {_num(mem['peak_rss_mb'], '.0f')} |",
        f"| largest ended child process (peak RSS) | {_num(mem['peak_rss_children_mb'], '.0f')} |",
        f"| learner update (peak over its phase) | {_num(mem['learner/peak_memory_mb'], '.0f')} |",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run-dir", type=Path, required=True, help="a finished `wmrl train` run directory")
    ap.add_argument("--out", type=Path, default=REPO / "results" / "train", help="output directory")
    ap.add_argument("--note", default="", help="a sentence for the report (machine load, what ran beside it)")
    args = ap.parse_args(argv)
    result = breakdown(args.run_dir.resolve())
    args.out.mkdir(parents=True, exist_ok=True)
    command = " ".join(["python", "benchmarks/bench_train_step.py", *(argv if argv is not None else sys.argv[1:])])
    (args.out / "step_breakdown.json").write_text(json.dumps({**result, "command": command, "note": args.note},
                                                             indent=1, sort_keys=True) + "\n")
    (args.out / "step_breakdown.md").write_text(markdown(result, command, args.note))
    print((args.out / "step_breakdown.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
