"""The tiny LLM default with the adaptive anchor rule against the fixed one, paired by seed (issue 37).

    wmrl sweep sweeps/tiny_adaptive.yaml --max-parallel 1
    python scripts/adaptive_llm.py runs/sweeps/tiny_adaptive --out results/train/adaptive

Per run: the anchor groups the rule chose at each step and why (``anchor/frac`` and ``anchor/reason`` of
``metrics.jsonl``, the index in :data:`wmrl.anchor_rule.REASONS`), the executions, the CPU-hours
(``compute_hours``: the measured seconds of every phase) and the training-task score after the last step
(``sample_mean`` of the ``after`` evaluation, really executed). Writes ``OUT/summary.json`` and
``OUT/table.md``: per arm mean ± s.e., adaptive - fixed paired by seed (t-interval), and every run's
per-step anchor fraction with its reasons.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import train_learning as tl  # a sibling script: the sweep readers every report shares

from wmrl.anchor_rule import REASONS
from wmrl.simulate.report import mean_se
from wmrl.sweep.paired import paired

ARMS = ("adaptive", "fixed")


def run_record(run: Path) -> dict[str, Any]:
    cfg = tl.run_config(run)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rows = sorted({r["step"]: r for r in rows}.values(), key=lambda r: r["step"])
    return {"run": run.name, "rule": cfg["algorithm"]["anchor_rule"], "seed": int(cfg["algorithm"]["seed"]),
            "groups_per_step": int(cfg["algorithm"]["groups_per_step"]),
            "anchor_frac_per_step": [float(r["anchor/frac"]) for r in rows],
            "reason_per_step": [REASONS[int(r["anchor/reason"])] for r in rows],
            "executions": int(rows[-1]["executions"]), "cpu_hours": float(rows[-1]["compute_hours"]),
            "train_score": float(tl.read_evals(run)[("after", "train")]["sample_mean"])}


def summarise(sweep: Path) -> dict[str, Any]:
    records = [run_record(run) for run in sorted((sweep / "runs").iterdir())
               if (run / "ENDED").is_file() and json.loads((run / "ENDED").read_text()).get("reason") == "finished"]
    arms: dict[str, Any] = {}
    for arm in ARMS:
        mine = sorted((r for r in records if r["rule"] == arm), key=lambda r: r["seed"])
        if not mine:
            raise SystemExit(f"no finished run with algorithm.anchor_rule={arm} in {sweep}")
        summary: dict[str, Any] = {"seeds": [r["seed"] for r in mine]}
        for key in ("train_score", "cpu_hours", "executions"):
            mean, se = mean_se([float(r[key]) for r in mine])
            summary[f"{key}_mean"], summary[f"{key}_se"] = mean, se
        fracs = [f for r in mine for f in r["anchor_frac_per_step"]]
        summary["anchor_frac_mean"] = sum(fracs) / len(fracs)
        arms[arm] = summary
    by_seed = {arm: {r["seed"]: r for r in records if r["rule"] == arm} for arm in ARMS}
    differences = {key: paired({s: r[key] for s, r in by_seed["fixed"].items()},
                               {s: r[key] for s, r in by_seed["adaptive"].items()}).to_dict()
                   for key in ("train_score", "cpu_hours", "executions")}
    return {"sweep": str(sweep), "arms": arms, "adaptive_minus_fixed": differences, "runs": records}


def markdown(s: dict[str, Any], command: str) -> str:
    out = ["# The adaptive anchor rule on the tiny LLM default (issue 37)", "",
           (f"`{command}`; {len(s['runs'])} runs of `{Path(s['sweep']).name}`. Score: the training tasks' "
            "`sample_mean` after the last step (really executed); CPU-hours measured (every phase's seconds)."), "",
           "| rule | seeds | train score | CPU-hours | executions | mean anchor fraction |", "|---|---|---|---|---|---|"]
    for arm, a in s["arms"].items():
        out.append(f"| {arm} | {len(a['seeds'])} | {a['train_score_mean']:.3f} ± {a['train_score_se']:.3f} | "
                   f"{a['cpu_hours_mean']:.3f} ± {a['cpu_hours_se']:.3f} | {a['executions_mean']:.0f} | "
                   f"{a['anchor_frac_mean']:.3f} |")
    out += ["", "adaptive - fixed, paired by seed (mean, 95% t-interval):", ""]
    for key, d in s["adaptive_minus_fixed"].items():
        out.append(f"- {key}: {d['mean']:+.4g} [{d['ci95'][0]:+.4g}, {d['ci95'][1]:+.4g}] (n = {d['n']})")
    out += ["", "Anchor groups per step (of m) and the rule's reason:", "",
            "| run | anchor groups per step | reasons |", "|---|---|---|"]
    for r in s["runs"]:
        groups = " ".join(str(round(f * r["groups_per_step"])) for f in r["anchor_frac_per_step"])
        reasons = ", ".join(f"{name} x{r['reason_per_step'].count(name)}"
                            for name in dict.fromkeys(r["reason_per_step"]))
        out.append(f"| {r['run']} | {groups} | {reasons} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("sweep", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    s = summarise(args.sweep)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(json.dumps(s, indent=1, sort_keys=True) + "\n")
    command = "python scripts/adaptive_llm.py " + " ".join(argv if argv is not None else sys.argv[1:])
    (args.out / "table.md").write_text(markdown(s, command))
    print((args.out / "table.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
