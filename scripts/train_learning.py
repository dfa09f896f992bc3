"""Does the tiny default really learn? Before/after scores and executions of a `wmrl train` sweep's runs.

    wmrl sweep sweeps/tiny_train.yaml --max-parallel 2       # the runs (wmrl and grpo_real, 3 seeds)
    wmrl sweep sweeps/tiny_train_budget.yaml --max-parallel 2  # wmrl given ~half grpo_real's CPU-hours
    python scripts/train_learning.py runs/sweeps/tiny_train runs/sweeps/tiny_train_budget  # this report

For every finished run of the sweep (its ``config.yaml`` names variant and seed), the run's own
``evals.jsonl`` holds the mean true score of freshly sampled solutions, really executed, before the
first step and after the last (``sample_mean``: the mean over tasks x k samples of that evaluation).
The report (``results/train/learning.{md,json}``) gives per variant and split: mean ± standard error
over seeds of those per-seed means, of the per-seed gain (after - before) and the gain in standard
errors; the trajectories each variant executed during training (``progress.json``), and their ratio
to ``grpo_real``'s; and each run's wall time.

Compute: each run's CPU-hours (``compute_hours``, the measured seconds of every phase; the tiny default
runs on CPU), and per variant, on its seed-mean curve of training-task score against CPU-hours (one
point per evaluation, paired with the hours logged at its step, as ``wmrl compare`` pairs them): the
CPU-hours at which it first reaches ``grpo_real``'s final score, and ``grpo_real``'s score at the
variant's CPU-hours (linear between evaluations: such a value is marked "interpolated", in the table and
in ``learning.json``'s ``*_read`` keys, since no evaluation measured it).
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
from pathlib import Path

import numpy as np
import yaml

from wmrl.simulate.report import mean_se, mean_se_text
from wmrl.sweep.compare import (
    INTERPOLATED,
    MARK,
    crossing_read,
    first_crossing,
    score_at,
    score_at_read,
)
from wmrl.sweep.records import score_curve

REPO = Path(__file__).resolve().parents[1]
REFERENCE = "grpo_real"


def read_evals(run: Path) -> dict[tuple[str, str], dict]:
    out = {}
    for line in (run / "evals.jsonl").read_text().splitlines():
        e = json.loads(line)
        out[(e["label"], e["split"])] = e  # a replayed evaluation replaces the earlier line
    return out


def run_config(run: Path) -> dict:
    """The run's resolved config (``config.yaml``, as `wmrl launch` wrote it)."""
    return yaml.safe_load((run / "config.yaml").read_text())


def finished_runs(sweeps: list[Path]) -> dict[str, list[Path]]:
    """Finished run directories of the sweeps by variant, in seed order. A variant that more than one of
    the sweeps ran is labelled with each sweep's name too (``wmrl [tiny_train_budget]``)."""
    found: dict[tuple[str, Path], list[tuple[int, Path]]] = {}
    for sweep in sweeps:
        for run in sorted((sweep / "runs").iterdir()):
            ended = run / "ENDED"
            if not ended.is_file() or json.loads(ended.read_text()).get("reason") != "finished":
                continue
            cfg = run_config(run)
            found.setdefault((cfg["algorithm"]["variant"], sweep), []).append((int(cfg["algorithm"]["seed"]), run))
    variants = [variant for variant, _ in found]
    return {(variant if variants.count(variant) == 1 else f"{variant} [{sweep.name}]"): [run for _, run in sorted(rs)]
            for (variant, sweep), rs in found.items()}


def wall_minutes(run: Path) -> float:
    """Minutes the run's coordinator processes ran. A run stopped and resumed later (`--resume`) counts
    each process (the manifest's `starts`) from its start to its last event, the last one to the final
    evaluation; the gap between them and a killed process's unfinished work are not counted."""
    stamps = [json.loads(line)["at"] for line in (run / "evals.jsonl").read_text().splitlines()]
    manifest = json.loads((run / "manifest.json").read_text()) if (run / "manifest.json").is_file() else {}
    events_file = run / "logs" / "coordinator-events.jsonl"
    starts = manifest.get("starts") or []
    if not starts or not events_file.is_file():
        return (max(stamps) - manifest.get("created_at", min(stamps))) / 60
    last_event: dict[int, float] = {}
    for line in events_file.read_text().splitlines():
        event = json.loads(line)
        last_event[event["pid"]] = max(last_event.get(event["pid"], 0.0), event["at"])
    total = 0.0
    for i, start in enumerate(starts):
        end = last_event.get(start["pid"], 0.0)
        if i == len(starts) - 1:
            end = max(end, max(stamps))
        total += max(0.0, end - start["started_at"])
    return total / 60


def cost_curve(run: Path) -> tuple[float, list[float], list[float]]:
    """(final CPU-hours, curve hours, curve score): the training-task score at each evaluation against
    the compute hours the run had spent by that step."""
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    cost = sorted({m["step"]: m["compute_hours"] for m in metrics}.items())
    evals = sorted({e["step"]: e["sample_mean"] for (_, split), e in read_evals(run).items() if split == "train"}.items())
    hours, score = score_curve(evals, cost)
    return cost[-1][1], hours, score


def compute_table(runs: dict[str, list[Path]]) -> tuple[list[dict], list[str]]:
    """Per variant: CPU-hours, its ratio to grpo_real's, CPU-hours to grpo_real's final score, and
    grpo_real's score at the variant's CPU-hours (on the seed-mean curves)."""
    curves = {}
    for variant, rs in runs.items():
        per_run = [cost_curve(r) for r in rs]
        n = min(len(h) for _, h, _ in per_run)
        curves[variant] = ([t for t, _, _ in per_run], np.mean([h[:n] for _, h, _ in per_run], axis=0),
                           np.mean([c[:n] for _, _, c in per_run], axis=0))
    ref = curves.get(REFERENCE)
    ref_final = float(ref[2][-1]) if ref is not None else float("nan")
    rows, lines = [], [(f"| variant | seeds | CPU-hours (mean ± s.e.) | vs {REFERENCE} | final score (seed mean) | "
                        f"CPU-hours to {REFERENCE}'s final score | {REFERENCE}'s score at these CPU-hours |"),
                       "|---|---|---|---|---|---|---|"]
    for variant, (totals, hours, score) in curves.items():
        total, total_se = mean_se(totals)
        ratio = total / float(np.mean(ref[0])) if ref is not None else float("nan")
        to_ref = first_crossing(hours, score, ref_final) if ref is not None else None
        ref_at = score_at(ref[1], ref[2], total) if ref is not None else float("nan")
        to_ref_read = crossing_read(hours, score, ref_final) if to_ref is not None else None
        ref_at_read = score_at_read(ref[1], total) if ref is not None else None
        rows.append({"variant": variant, "cpu_hours": totals, "cpu_hours_vs_grpo_real": ratio,
                     "final_score": float(score[-1]), "cpu_hours_to_grpo_real_final": to_ref,
                     "cpu_hours_to_grpo_real_final_read": to_ref_read,
                     "grpo_real_score_at_cpu_hours": ref_at, "grpo_real_score_at_cpu_hours_read": ref_at_read})
        reach = "-" if ref is None else ("not reached" if to_ref is None else f"{to_ref:.3f}{MARK[to_ref_read]}")
        lines.append(f"| {variant} | {len(totals)} | {mean_se_text(total, total_se, len(totals))} | "
                     f"{'-' if math.isnan(ratio) else f'{ratio:.1%}'} | {score[-1]:.4f} | {reach} | "
                     f"{'-' if math.isnan(ref_at) else f'{ref_at:.4f}{MARK[ref_at_read]}'} |")
    if any(INTERPOLATED in (r["cpu_hours_to_grpo_real_final_read"], r["grpo_real_score_at_cpu_hours_read"])
           for r in rows):
        lines += ["", ("(interpolated): read linearly between two evaluations of a seed-mean curve, not measured "
                       "by an evaluation at that point. (its final): "
                       f"{REFERENCE}'s last evaluation, at fewer CPU-hours.")]
    return rows, lines


def evaluation_table(runs: dict[str, list[Path]]) -> tuple[list[dict], list[str]]:
    """Per variant, every training-task evaluation the runs share (before, each ``eval_every``, after):
    its step, the CPU-hours spent by then and the score, mean ± standard error over seeds with each
    seed's score. A run longer than the default shows here what the default's length would have given."""
    rows, lines = [], ["| variant | step | CPU-hours by then (mean ± s.e.) | training-task score (mean ± s.e.) | per seed |",
                       "|---|---|---|---|---|"]
    for variant, rs in runs.items():
        per_run = []
        for run in rs:
            _, hours, score = cost_curve(run)
            steps = sorted({e["step"] for (_, split), e in read_evals(run).items() if split == "train"})
            per_run.append(dict(zip(steps, zip(hours, score))))
        for step in sorted(set.intersection(*(set(p) for p in per_run))):
            hours, scores = [p[step][0] for p in per_run], [p[step][1] for p in per_run]
            (h, hse), (m, mse) = mean_se(hours), mean_se(scores)
            rows.append({"variant": variant, "step": step, "cpu_hours": hours, "score": scores})
            lines.append(f"| {variant} | {step} | {mean_se_text(h, hse, len(hours))} | {mean_se_text(m, mse, len(scores))} "
                         f"| {', '.join(f'{x:.3f}' for x in scores)} |")
    return rows, lines


def world_model_in_run(run: Path) -> dict | None:
    """What the world model did in a run: its JSON fallback rate and pre-check share (last logged
    step's cumulative counts), and, on the anchor pairs (the trajectories both predicted and executed),
    the spread of r_hat and its correlation with the executed r."""
    from wmrl.calibration.pool import AnchorPool

    lines = (run / "metrics.jsonl").read_text().splitlines() if (run / "metrics.jsonl").is_file() else []
    last = json.loads(lines[-1]) if lines else {}
    if "world_model/submissions" not in last:
        return None  # grpo_real: no world model
    r_hat, r = AnchorPool.load(run / "calibration").arrays()
    corr = float(np.corrcoef(r_hat, r)[0, 1]) if len(r) > 2 and r_hat.std() > 0 and r.std() > 0 else float("nan")
    return {"submissions": last["world_model/submissions"], "precheck_rate": last.get("world_model/precheck_rate"),
            "parse_fallback_rate": last.get("world_model/parse_fallback_rate"), "pairs": len(r),
            "r_hat_mean": float(r_hat.mean()), "r_hat_sd": float(r_hat.std()), "distinct_r_hat": len(set(r_hat)),
            "r_mean": float(r.mean()), "pearson_r_hat_r": corr}


def world_model_table(runs: dict[str, list[Path]]) -> list[str]:
    lines = [("| run | submissions | settled by pre-check | JSON fallback | anchor pairs | r_hat mean (sd) "
             "| distinct r_hat | executed r mean | Pearson(r_hat, r) |"), "|---|---|---|---|---|---|---|---|---|"]
    for label, rs in runs.items():
        for run in rs:
            w = world_model_in_run(run)
            if w is None:
                continue
            name = run.name if "[" not in label else f"{run.name} [{run.parent.parent.name}]"
            pre = "-" if w["precheck_rate"] is None else f"{w['precheck_rate']:.1%}"
            fallback = "-" if w["parse_fallback_rate"] is None else f"{w['parse_fallback_rate']:.1%}"
            corr = "undefined (r_hat constant)" if math.isnan(w["pearson_r_hat_r"]) else f"{w['pearson_r_hat_r']:.3f}"
            lines.append(f"| {name} | {w['submissions']:.0f} | {pre} | {fallback} | {w['pairs']} | "
                         f"{w['r_hat_mean']:.3f} ({w['r_hat_sd']:.3f}) | {w['distinct_r_hat']} | {w['r_mean']:.3f} | "
                         f"{corr} |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweeps", nargs="*", default=[str(REPO / "runs" / "sweeps" / "tiny_train")],
                        help="sweep directories (default runs/sweeps/tiny_train)")
    parser.add_argument("--out", default=str(REPO / "results" / "train"))
    parser.add_argument("--note", default="", help="what shared the machine with the runs (for the wall times)")
    parser.add_argument("--reference-run", action="append", default=[], metavar="RUN_DIR",
                        help=f"a finished {REFERENCE} run of another sweep, for the execution ratio when this "
                             "sweep has none (repeatable)")
    args = parser.parse_args()
    sweeps, out = [Path(s) for s in args.sweeps], Path(args.out)
    runs = finished_runs(sweeps)
    if not runs:
        print(f"no finished run under {', '.join(f'{s}/runs' for s in sweeps)}", file=sys.stderr)
        return 1
    executed = {v: [json.loads((r / "progress.json").read_text())["executions"] for r in rs] for v, rs in runs.items()}
    if args.reference_run and REFERENCE not in executed:
        executed[REFERENCE] = [json.loads((Path(r) / "progress.json").read_text())["executions"]
                               for r in args.reference_run]
    rows, table = [], []
    for variant, rs in runs.items():
        for split in ("train", "heldout"):
            pairs = [(e[("before", split)]["sample_mean"], e[("after", split)]["sample_mean"])
                     for e in map(read_evals, rs) if ("before", split) in e and ("after", split) in e]
            if not pairs:
                continue
            before, after = [b for b, _ in pairs], [a for _, a in pairs]
            (b, bse), (a, ase) = mean_se(before), mean_se(after)
            d, dse = mean_se([y - x for x, y in pairs])
            ratio = (float(np.mean(executed[variant]) / np.mean(executed[REFERENCE]))
                     if REFERENCE in executed and np.mean(executed[REFERENCE]) > 0 else float("nan"))
            rows.append({"variant": variant, "split": split, "seeds": len(pairs), "before": b, "before_se": bse,
                         "after": a, "after_se": ase, "gain": d, "gain_se": dse,
                         "gain_in_se": d / dse if len(pairs) > 1 and dse > 0 else float("nan"),
                         "per_seed": [{"before": x, "after": y} for x, y in pairs],
                         "executions": executed[variant], "executions_vs_grpo_real": ratio,
                         "wall_minutes": [round(wall_minutes(r), 1) for r in rs]})
            n = len(pairs)
            gain = ("+" if d >= 0 else "") + mean_se_text(d, dse, n)
            gain += f" ({rows[-1]['gain_in_se']:.1f} s.e.)" if math.isfinite(rows[-1]['gain_in_se']) else ""
            table.append(f"| {variant} | {split} | {n} | {mean_se_text(b, bse, n)} | {mean_se_text(a, ase, n)} | "
                         f"{gain} | {np.mean(executed[variant]):.0f} "
                         f"({f'{ratio:.1%} of {REFERENCE}' if math.isfinite(ratio) else f'no {REFERENCE} run'}) |")
    compute_rows, compute_lines = compute_table(runs)
    evaluation_rows, evaluation_lines = evaluation_table(runs)
    out.mkdir(parents=True, exist_ok=True)
    (out / "learning.json").write_text(json.dumps({"scores": rows, "compute": compute_rows,
                                                   "evaluations": evaluation_rows}, indent=1) + "\n")
    header = [("| variant | split | seeds | before (mean ± s.e.) | after | gain (s.e.) | trajectories executed "
               "in training |"), "|---|---|---|---|---|---|---|"]
    walls = "; ".join(f"{r['variant']}: {', '.join(map(str, r['wall_minutes']))} min" for r in rows
                      if r["split"] == "train")
    (out / "learning.md").write_text(
        "# Does the tiny default learn?\n\nMean true score of freshly sampled solutions, really executed "
        "(per seed: the mean over tasks x k samples of one evaluation; then mean ± standard error over "
        "seeds). Gain = after - before, per seed.\n\n"
        "Runs: " + "; ".join(f"`wmrl sweep sweeps/{s.name}.yaml --max-parallel 2`" for s in sweeps) + "; report: "
        f"`python scripts/train_learning.py {shlex.join(sys.argv[1:])}`.\n\n" + "\n".join(header + table) +
        f"\n\nWall time per run (one torch thread each, 2 cores): {walls}. {args.note}\n"
        "\n## Compute\n\nCPU-hours = the measured seconds of every phase of the run (generation, world model, "
        "execution, update, ...) / 3600; the curves pair each evaluation's training-task score with the "
        "CPU-hours spent by its step, and are averaged over seeds point by point.\n\n" + "\n".join(compute_lines) +
        "\n\nEvery evaluation on the training tasks:\n\n" + "\n".join(evaluation_lines) + "\n"
        "\n## The world model in these runs\n\nCumulative over the run (last step). Anchor pairs: the "
        "trajectories both predicted by the world model and executed.\n\n" + "\n".join(world_model_table(runs)) + "\n")
    print("\n".join(header + table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
