"""Check a sweep plan against the real sweep: orderings by compute and by score, and where the plan was wrong.

    wmrl simulate --from-run runs/tiny --out plans/tiny          # the plan (plans/tiny/plan.csv)
    wmrl sweep sweeps/tiny_train.yaml && wmrl compare runs/sweeps/tiny_train --out results/sweeps/tiny_train
    python scripts/check_plan.py plans/tiny results/sweeps/tiny_train --out results/sweeps/tiny_train/plan_check.md

Both arguments are `wmrl compare`-format CSVs or directories holding plan.csv / compare.csv
(wmrl/sweep/plan_check.py says how settings are matched and what counts as wrong).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wmrl.sweep.plan_check import check_plan


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("predicted", help="the plan: plan.csv or its directory")
    parser.add_argument("real", help="the real sweep's compare.csv or its directory")
    parser.add_argument("--out", default=None, help="also write the report (Markdown) here")
    args = parser.parse_args(argv)
    try:
        report = check_plan(Path(args.predicted), Path(args.real))
    except (OSError, ValueError) as err:
        print(f"check_plan: {err}", file=sys.stderr)
        return 2
    text = f"# Plan {args.predicted} against the real sweep {args.real}\n\n{report.markdown()}"
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
