"""The transfer grid read seed by seed, from the records of `wmrl compare` (results/transfer/pilot.md).

    wmrl compare runs/sweeps/transfer_grid --score-metric eval/heldout/sample_mean --cost-metric cpu_hours \
        --out results/transfer/grid --no-log
    python scripts/grid_seeds.py results/transfer/grid/records.jsonl [--seeds 0,1,2]

Prints each cell's held-out score and CPU-hours by seed, then, paired by seed (a seed is one start: the
same SFT build and held-out evaluation before training):

- wmrl − grpo_real and wmrl − grpo_anchor_only at the cell's anchor fraction: per seed the mean over the
  wmrl cells, then the mean over seeds with its 95% t-interval (the seed is the unit, not the cell);
- how many (cell, seed) pairs put wmrl above grpo_anchor_only at its fraction;
- w_max 4 − w_max 1 over the (fraction, seed) pairs.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wmrl.sweep.paired import paired


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("records", type=Path, help="records.jsonl written by `wmrl compare`")
    ap.add_argument("--seeds", default=None, help="only these seeds, e.g. 0,1,2 (default: every seed)")
    args = ap.parse_args(argv)
    keep = {int(s) for s in args.seeds.split(",")} if args.seeds else None
    records = [json.loads(line) for line in args.records.read_text().splitlines() if line.strip()]
    records = [r for r in records if keep is None or r["seed"] in keep]

    def cell(r: dict) -> tuple:
        return r["variant"], r["anchor_frac"], r["w_max"] if r["variant"] == "wmrl" else None

    score: dict[tuple, dict[int, float]] = defaultdict(dict)
    cost: dict[tuple, dict[int, float]] = defaultdict(dict)
    for r in records:
        score[cell(r)][r["seed"]] = r["final_score"]
        if r["gpu_hours"] is not None and math.isfinite(r["gpu_hours"]):
            cost[cell(r)][r["seed"]] = r["gpu_hours"]
    for c in sorted(score, key=str):
        print(c, {s: round(v, 3) for s, v in sorted(score[c].items())},
              "CPU-h:", {s: round(v, 3) for s, v in sorted(cost[c].items())})
    seeds = sorted({r["seed"] for r in records})
    wmrl_cells = [c for c in score if c[0] == "wmrl"]
    baselines = {"grpo_real": lambda c: next(k for k in score if k[0] == "grpo_real"),
                 "grpo_anchor_only at the cell's fraction": lambda c: ("grpo_anchor_only", c[1], None)}
    for name, base_of in baselines.items():
        per_seed = {}
        for s in seeds:
            d = [score[c][s] - score[base_of(c)][s] for c in wmrl_cells
                 if s in score[c] and s in score.get(base_of(c), {})]
            if d:
                per_seed[s] = sum(d) / len(d)
                print(f"  seed {s}: wmrl - {name}: {per_seed[s]:+.3f} (mean of {len(d)} cells)")
        if len(per_seed) > 1:
            diff = paired({s: 0.0 for s in per_seed}, per_seed)
            print(f"wmrl - {name}: {diff.mean:+.4f}, 95% CI [{diff.ci95[0]:+.4f}, {diff.ci95[1]:+.4f}], "
                  f"{diff.n} seeds")
    above = [score[c][s] > score[("grpo_anchor_only", c[1], None)][s] for c in wmrl_cells for s in score[c]
             if s in score.get(("grpo_anchor_only", c[1], None), {})]
    print(f"wmrl cell above grpo_anchor_only at its fraction: {sum(above)} of {len(above)} (cell, seed) pairs")
    w_diff = [score[("wmrl", f, 4.0)][s] - score[("wmrl", f, 1.0)][s] for f in sorted({c[1] for c in wmrl_cells})
              for s in seeds if s in score.get(("wmrl", f, 4.0), {}) and s in score.get(("wmrl", f, 1.0), {})]
    if len(w_diff) > 1:
        print(f"w_max 4 - w_max 1 over (fraction, seed): {statistics.mean(w_diff):+.4f}, "
              f"sd {statistics.stdev(w_diff):.4f}, n {len(w_diff)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
