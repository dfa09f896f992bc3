"""How much of a run's execution re-ran code it had already executed, and what a content cache would save.

    python scripts/execution_repeats.py runs/sweeps/tiny_train/runs/grpo_real_s{0,1,2} \
        --out results/train/execution_repeats.md

For each run, from its rollout records (``rollouts/step-*.jsonl.gz``: every executed trajectory's task,
final code, score and execution seconds) and its ``metrics.jsonl``:

- executions, distinct (task, code) among them, and how many codes ran more than once with differing
  scores (0 means the repeats were deterministic: a cache returning the first outcome would have given
  every trajectory the same reward, so the run would have learned exactly the same);
- CPU-hours as measured, and with a content cache (``launch.reuse_executions``): a step's execution
  seconds are the sum of its executions' measured seconds, so each step's are scaled by the share spent
  on code not executed before in the run (a code's first execution kept, with its own seconds);
- execution's share of the CPU-hours, as measured and with the cache: at an equal number of steps, the
  most that any world model (one that cost nothing and taught as much as execution) could save against
  that baseline.

A counterfactual from the run's own records, not a run with the cache: it says what such a baseline
would cost, so that a compute saving is not credited to the world model that a cache would give too.
Where the repeats were deterministic, the run with the cache learns exactly the same.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections import defaultdict
from pathlib import Path


def repeats(run: Path) -> dict:
    seen: set[tuple[str, str]] = set()
    scores: dict[tuple[str, str], list] = defaultdict(list)
    per_step: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0])  # [all, first-seen] execution seconds
    executions = 0
    for path in sorted((run / "rollouts").glob("step-*.jsonl.gz")):
        with gzip.open(path, "rt") as f:
            for line in f.read().splitlines()[1:]:  # the first line is the step's header
                record = json.loads(line)
                if record["role"] != "executed":
                    continue
                executions += 1
                key = (record["task_id"], record["final_code"] or "")
                scores[key].append(record["score"])
                seconds = float(record["seconds"].get("execution", 0.0))
                step = int(record["step"]) + 1  # rollouts count steps from 0, metrics from 1
                per_step[step][0] += seconds
                if key not in seen:
                    seen.add(key)
                    per_step[step][1] += seconds
    metrics = {m["step"]: m for m in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "step" in m}
    measured = cached = executed = executed_cached = 0.0
    previous = 0.0
    for step, m in sorted(metrics.items()):
        seconds = m["compute_hours"] * 3600 - previous
        previous = m["compute_hours"] * 3600
        execution = float(m.get("step_seconds_execution", 0.0))
        total, first = per_step.get(step, [0.0, 0.0])
        kept = execution * first / total if total > 0 else execution
        measured += seconds
        cached += seconds - execution + kept
        executed += execution
        executed_cached += kept
    return {"run": run.name, "executions": executions, "distinct": len(seen),
            "codes_run_more_than_once": sum(len(v) > 1 for v in scores.values()),
            "repeated_with_differing_scores": sum(len(set(v)) > 1 for v in scores.values()),
            "cpu_hours": measured / 3600, "cpu_hours_with_cache": cached / 3600,
            "execution_share": executed / measured if measured else 0.0,
            "execution_share_with_cache": executed_cached / cached if cached else 0.0}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="run directories")
    parser.add_argument("--out", default=None, help="write the table here (Markdown) and beside it as .json")
    args = parser.parse_args()
    rows = [repeats(Path(r)) for r in args.runs]
    lines = [("| run | executions | distinct codes | codes run more than once (of which with differing scores) "
             "| CPU-hours | with a content cache (estimate) | execution's share of the CPU-hours (with the cache) |"),
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['run']} | {r['executions']} | {r['distinct']} ({r['distinct'] / max(1, r['executions']):.0%}) | "
              f"{r['codes_run_more_than_once']} ({r['repeated_with_differing_scores']}) | {r['cpu_hours']:.3f} | {r['cpu_hours_with_cache']:.3f} "
              f"({r['cpu_hours_with_cache'] / r['cpu_hours']:.0%}) | "
              f"{r['execution_share']:.0%} ({r['execution_share_with_cache']:.0%}) |" for r in rows]
    print("\n".join(lines))
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("# Repeated executions, and a content cache's counterfactual\n\n"
                       + __doc__.split("\n\n", 2)[2].strip() + "\n\nCommand: `python scripts/execution_repeats.py "
                       + " ".join(sys.argv[1:]) + "`\n\n" + "\n".join(lines) + "\n")
        out.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
