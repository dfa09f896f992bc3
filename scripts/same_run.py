"""Are two runs of one config the same run, step by step? (A refactor's check: behaviour unchanged.)

    python scripts/same_run.py RUN_A RUN_B

Compares, at every step: the tokens of every trajectory (prompt and generated ids of every turn, from
``rollouts/step-N.jsonl.gz``), their scores, and every metric of ``metrics.jsonl`` except what is measured
rather than computed (seconds, CPU-hours, memory, wall-clock stamps); then the evaluations' scores. Prints
the first difference of each kind and exits 1 if there is one, else prints what it compared and exits 0.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from wmrl.agent.records import read_rollouts

MEASURED = ("seconds", "compute_hours", "cpu_hours", "peak_", "_mb", "wall", "eta_s", "updated_at", "throughput", "timestamp")


def computed_metrics(run: Path) -> dict[int, dict[str, Any]]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {r["step"]: {k: v for k, v in r.items() if not any(m in k for m in MEASURED)} for r in rows}


def trajectories(run: Path, step: int) -> list[dict[str, Any]]:
    _, groups = read_rollouts(run, step)
    return [{"task": t.task_id, "role": t.role, "tokens": t.token_ids(), "score": t.score, "r_hat": t.r_hat}
            for group in groups for t in group]


def evaluations(run: Path) -> list[tuple[str, str, Any]]:
    lines = [json.loads(line) for line in (run / "evals.jsonl").read_text().splitlines() if line.strip()]
    return [(e["label"], e["split"], e["sample_mean"]) for e in lines]


def compare(a: Path, b: Path) -> list[str]:
    problems = []
    metrics_a, metrics_b = computed_metrics(a), computed_metrics(b)
    if sorted(metrics_a) != sorted(metrics_b):
        problems.append(f"steps differ: {sorted(metrics_a)} vs {sorted(metrics_b)}")
    for step in sorted(set(metrics_a) & set(metrics_b)):
        ma, mb = metrics_a[step], metrics_b[step]
        diff = sorted(k for k in set(ma) | set(mb) if ma.get(k) != mb.get(k))
        if diff:
            problems.append(f"step {step}: metrics differ: " + ", ".join(f"{k}={ma.get(k)!r} vs {mb.get(k)!r}"
                                                                         for k in diff[:5]))
        # rollouts are written for the step just taken (0-based); metrics rows count finished steps
        ta, tb = trajectories(a, step - 1), trajectories(b, step - 1)
        if ta != tb:
            first = next(i for i, (x, y) in enumerate(zip(ta, tb, strict=False)) if x != y) if len(ta) == len(tb) else 0
            problems.append(f"step {step}: trajectory {first} differs (tokens or scores)")
    if evaluations(a) != evaluations(b):
        problems.append(f"evaluations differ: {evaluations(a)} vs {evaluations(b)}")
    return problems


def main(argv: list[str]) -> int:
    a, b = (Path(x) for x in argv)
    problems = compare(a, b)
    for line in problems:
        print(line)
    if not problems:
        steps = len(computed_metrics(a))
        print(f"identical: {steps} steps (every trajectory's tokens and scores, every computed metric) and "
              f"{len(evaluations(a))} evaluations")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
