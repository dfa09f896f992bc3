"""Does the tiny default really learn? `wmrl train` over seeds, before/after scores, executions per variant.

    python scripts/train_learning.py --seeds 3 --variants wmrl,grpo_real [key=value ...]

Each (variant, seed) is one `wmrl train` run (the embedded default plus the overrides) under
``runs/learning/``; a finished run is not re-run. The report (``results/train/learning.{md,json}``)
gives, per variant and split, the mean true score of freshly sampled solutions, really executed, before
and after training (the run's own ``evals.jsonl``): mean ± standard error over seeds of the per-seed
sample means, and of the per-seed improvement; and the trajectories each variant executed during training.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def run_one(variant: str, seed: int, root: Path, overrides: list[str]) -> Path:
    name = f"{variant}-s{seed}"
    run = root / name
    if (run / "ENDED").exists() and "finished" in (run / "ENDED").read_text():
        return run
    cmd = [sys.executable, "-m", "wmrl.cli.main", "train", f"run_name={name}", f"runs_root={root}",
           f"algorithm.variant={variant}", f"algorithm.seed={seed}", f"sampling.seed={seed}", *overrides]
    print("$", " ".join(cmd[2:]), flush=True)
    subprocess.run(cmd, cwd=REPO, check=True)
    return run


def read_evals(run: Path) -> dict[tuple[str, str], dict]:
    out = {}
    for line in (run / "evals.jsonl").read_text().splitlines():
        e = json.loads(line)
        out[(e["label"], e["split"])] = e  # a replayed evaluation replaces the earlier line
    return out


def mean_se(values: list[float]) -> tuple[float, float]:
    x = np.asarray(values, dtype=float)
    se = float(x.std(ddof=1) / math.sqrt(len(x))) if len(x) > 1 else float("nan")
    return float(x.mean()), se


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--variants", default="wmrl,grpo_real")
    parser.add_argument("--root", default=str(REPO / "runs" / "learning"))
    parser.add_argument("--out", default=str(REPO / "results" / "train"))
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    root, out = Path(args.root), Path(args.out)
    rows, table = [], []
    for variant in args.variants.split(","):
        runs = [run_one(variant, s, root, args.overrides) for s in range(args.seeds)]
        for split in ("train", "heldout"):
            before, after = [], []
            for run in runs:
                evals = read_evals(run)
                if ("before", split) in evals and ("after", split) in evals:
                    before.append(evals[("before", split)]["sample_mean"])
                    after.append(evals[("after", split)]["sample_mean"])
            if not before:
                continue
            (b, bse), (a, ase) = mean_se(before), mean_se(after)
            d, dse = mean_se([y - x for x, y in zip(before, after)])
            executed = [json.loads((r / "progress.json").read_text())["executions"] for r in runs]
            rows.append({"variant": variant, "split": split, "seeds": len(before), "before": b, "before_se": bse,
                         "after": a, "after_se": ase, "gain": d, "gain_se": dse,
                         "gain_in_se": d / dse if dse and dse > 0 else float("nan"),
                         "executions_mean": float(np.mean(executed))})
            table.append(f"| {variant} | {split} | {len(before)} | {b:.4f} ± {bse:.4f} | {a:.4f} ± {ase:.4f} | "
                         f"{d:+.4f} ± {dse:.4f} ({rows[-1]['gain_in_se']:.1f} SE) | {np.mean(executed):.0f} |")
    out.mkdir(parents=True, exist_ok=True)
    (out / "learning.json").write_text(json.dumps(rows, indent=1) + "\n")
    header = ["| variant | split | seeds | before (mean ± s.e.) | after | gain (s.e.) | executions in training |",
              "|---|---|---|---|---|---|---|"]
    text = "\n".join(header + table)
    (out / "learning.md").write_text(
        "# Does the tiny default learn?\n\nMean true score of freshly sampled solutions, really executed "
        "(per-seed mean over tasks x k samples; mean ± standard error over seeds).\n\n"
        f"Command: `python scripts/train_learning.py --seeds {args.seeds} --variants {args.variants} "
        f"{' '.join(args.overrides)}`\n\n{text}\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
