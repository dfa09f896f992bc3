"""Run-level error rates of the Assumption-6 audit, by simulation (issue 7, item 5).

Each simulated run streams anchor pairs through the real ``Calibrator`` exactly as a 400-step WMRL run
with m = 8 groups, n = 8 trajectories and anchor_frac = 0.1 does (one anchor group of 8 pairs per step,
refit every 64 pairs after 200) and audits at every refit, as the coordinator does. A run *warned* when
any audit of it warned (after the persistence rule). The benchmark behind the pairs mirrors
``wmrl simulate``: 16 tasks x 16 approaches of quality ~ Beta(2, 4), crash probability 0.05 + 0.3 q, a
policy that concentrates on good approaches over the run (so the distribution of r moves, as in
training). The world model: r_hat = clip(phi(r) + group offset + task offset + noise, 0, 1).

    nice -n 10 python scripts/audit_error_rates.py --seeds 40 --workers 2 --out results/calibration

writes ``audit_error_rates.{json,md,png}``. Thresholds are ``AuditThresholds()`` (the committed ones).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing import Pool
from pathlib import Path

import numpy as np

from wmrl.calibration.calibrator import Calibrator
from wmrl.calibration.pool import AnchorPair
from wmrl.config import AlgorithmConfig

STEPS, TASKS, CANDIDATES, N = 400, 16, 16, 8
BUMP_CENTRE, BUMP_WIDTH = 0.35, 0.08  # as wmrl/simulate/world_model.py


def phi_fn(name: str, param: float) -> Callable[[np.ndarray], np.ndarray]:
    if name == "power":
        return lambda r: r**param
    if name == "affine":
        return lambda r: 0.2 + 0.6 * r
    if name == "bump":
        return lambda r: r + param * np.exp(-0.5 * ((r - BUMP_CENTRE) / BUMP_WIDTH) ** 2)
    if name == "identity":
        return lambda r: r
    if name == "saturating":  # the simulator's `saturating` scenario: every r >= 0.5 reads 0.9
        return lambda r: np.minimum(0.9, 0.15 + 1.5 * r)
    raise ValueError(name)


@dataclass(frozen=True)
class Cell:
    """One world model; ``expect``: the check that should warn (None: a null cell, nothing should)."""

    name: str
    phi: str
    param: float = 0.0
    noise: float = 0.1
    group_sd: float = 0.0
    task_offset: float = 0.0  # added to the first half of the tasks
    drift_phi: str | None = None  # phi from mid-run on
    drift_param: float = 0.0
    expect: str | None = None
    kind: str = "null"


CELLS: list[Cell] = [
    # null cells: even seeds phi = r^0.3 (the simulator's default, concave), odd seeds 0.2 + 0.6 r (an intercept)
    *(Cell(f"r^0.3 / 0.2+0.6r, σ={s}, group offsets sd {g}", "power|affine", 0.3, s, g) for s in (0.02, 0.1, 0.2)
      for g in (0.0, 0.2)),
    Cell("0.2+0.6r, σ=0 (noise-free)", "affine", 0.0, 0.0, 0.0),
    *(Cell(f"bump h={h} σ={s}", "bump", h, s, expect="monotonicity", kind="power") for h in (0.3, 0.5) for s in (0.1, 0.2)),
    Cell("bump h=0.5 σ=0.2, group offsets sd 0.1", "bump", 0.5, 0.2, 0.1, expect="monotonicity", kind="power"),
    Cell("drift r^0.3 → r at step 200, σ=0.1", "power", 0.3, 0.1, drift_phi="identity", expect="stationarity", kind="power"),
    Cell("drift r^0.3 → r^0.5 at step 200, σ=0.1", "power", 0.3, 0.1, drift_phi="power", drift_param=0.5,
         expect="stationarity", kind="power"),
    Cell("per-task offset −0.2 on half the tasks, r^0.3 σ=0.1, group offsets sd 0.1", "power", 0.3, 0.1, 0.1,
         task_offset=-0.2, expect="task_bias", kind="power"),
    # issue 37's flat_top check: a world model that saturates at the top (monotone: Assumption 6 holds)
    *(Cell(f"saturating min(0.9, 0.15+1.5r), σ={s}", "saturating", 0.0, s, expect="flat_top", kind="power")
      for s in (0.03, 0.1)),
    Cell("r^0.3, σ=0.03 (the simulator's default world model)", "power", 0.3, 0.03),
]
# The Assumption-6 checks; flat_top ("cannot rank at the top") is counted on its own: noise alone can make
# a monotone world model unable to rank, which is not a false warning of that check.
ASSUMPTION_CHECKS = ("monotonicity", "stationarity", "task_bias", "coverage")


@dataclass
class RunOutcome:
    warned: list[str] = field(default_factory=list)  # checks that warned at some audit
    first_warning_step: dict[str, int] = field(default_factory=dict)
    flagged: list[str] = field(default_factory=list)  # checks that flagged at some audit
    named_tasks: dict[str, float] = field(default_factory=dict)  # tasks named by the last task warning
    audits: int = 0
    rho_after_warmup: list[float] = field(default_factory=list)


def simulate_run(cell: Cell, seed: int) -> RunOutcome:
    rng = np.random.default_rng([seed, 7])
    quality = rng.beta(2.0, 4.0, size=(TASKS, CANDIDATES))
    crash = 0.05 + 0.3 * quality
    value = (1 - crash) * quality
    group_rng = np.random.default_rng([seed, 8])
    cal = Calibrator(AlgorithmConfig())
    out = RunOutcome()
    for step in range(STEPS):
        beta = 12.0 * step / STEPS  # the policy concentrates on the better approaches over the run
        task = int(rng.integers(TASKS))
        logits = beta * value[task] / value[task].max()
        probs = np.exp(logits - logits.max())
        actions = rng.choice(CANDIDATES, size=N, p=probs / probs.sum())
        r = np.where(rng.random(N) < crash[task, actions], 0.0, quality[task, actions])
        drifted = cell.drift_phi is not None and step >= STEPS // 2
        name = cell.phi.split("|")[seed % len(cell.phi.split("|"))]
        phi = phi_fn(cell.drift_phi, cell.drift_param) if drifted else phi_fn(name, cell.param)
        offset = group_rng.normal(0.0, cell.group_sd) if cell.group_sd else 0.0
        offset += cell.task_offset if task < TASKS // 2 else 0.0
        r_hat = np.clip(phi(r) + offset + (rng.normal(0.0, cell.noise, N) if cell.noise else 0.0), 0.0, 1.0)
        refits = cal.debiaser.n_refits
        cal.observe(
            [AnchorPair(f"{step}/{i}", step, f"task{task:02d}", f"g{step}", str(i), float(r_hat[i]), float(r[i]))
             for i in range(N)],
            step,
        )
        if cal.warmed_up:
            out.rho_after_warmup.append(cal.rho)
        if cal.debiaser.n_refits != refits:
            report = cal.audit()
            out.audits += 1
            out.flagged = sorted(set(out.flagged) | set(report.flags))
            for check, streak in report.streaks.items():
                if streak >= report.thresholds.persist and check not in out.warned:
                    out.warned.append(check)
                    out.first_warning_step[check] = step
                if check == "task_bias" and streak >= report.thresholds.persist:
                    out.named_tasks = dict(report.task_offsets)
    return out


def _job(args: tuple[int, int]) -> tuple[int, int, dict]:
    i, seed = args
    import logging

    logging.getLogger("wmrl.calibration.calibrator").setLevel(logging.ERROR)  # warnings are counted here
    return i, seed, simulate_run(CELLS[i], seed).__dict__


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson interval of a proportion k/n."""
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def summarise(cells: list[Cell], runs: dict[int, list[dict]]) -> list[dict]:
    rows = []
    for i, cell in enumerate(cells):
        outs = runs[i]
        n = len(outs)
        any_warn = sum(bool(set(o["warned"]) & set(ASSUMPTION_CHECKS)) for o in outs)
        hit = sum(cell.expect in o["warned"] for o in outs) if cell.expect else None
        row = {
            "cell": cell.name, "kind": cell.kind, "expect": cell.expect, "seeds": n,
            "any_warning": any_warn, "any_warning_ci": wilson(any_warn, n),
            "by_check": {c: sum(c in o["warned"] for o in outs) for c in ASSUMPTION_CHECKS},
            "flat_top": sum("flat_top" in o["warned"] for o in outs),
            "audits_per_run": float(np.mean([o["audits"] for o in outs])),
            "rho_mean": float(np.mean([np.mean(o["rho_after_warmup"]) for o in outs])),
        }
        if hit is not None:
            row["detected"], row["detected_ci"] = hit, wilson(hit, n)
            steps = [o["first_warning_step"][cell.expect] for o in outs if cell.expect in o["first_warning_step"]]
            row["median_first_warning_step"] = float(np.median(steps)) if steps else None
        if cell.expect == "task_bias":
            # the offset tasks sit below the others: named with a negative offset, the others positive
            offset_tasks = {f"task{t:02d}" for t in range(TASKS // 2)}
            named = [(t, v) for o in outs for t, v in o["named_tasks"].items()]
            row["named_tasks"] = len(named)
            row["named_correctly"] = sum((t in offset_tasks) == (v < 0) for t, v in named)
        rows.append(row)
    return rows


def merge(old: dict, rows: list[dict], meta: dict, command: str) -> tuple[list[dict], dict]:
    """The old report with the re-run cells' rows replaced (in CELLS order); the re-run is recorded."""
    new = {r["cell"]: r for r in rows}
    merged = [new.get(c.name) for c in CELLS]
    old_rows = {r["cell"]: r for r in old["rows"]}
    merged = [r if r is not None else old_rows.get(c.name) for r, c in zip(merged, CELLS, strict=True)]
    out_meta = dict(old["meta"])
    out_meta["reruns"] = [*old["meta"].get("reruns", []),
                          {"command": command, "cells": sorted(new), "seconds": meta["seconds"]}]
    out_meta["notes"] = [*old["meta"].get("notes", []), *meta["notes"]]
    return [r for r in merged if r is not None], out_meta


def write_markdown(rows: list[dict], out: Path, meta: dict) -> None:
    from wmrl.calibration.audit import AuditThresholds

    t = AuditThresholds()
    lines = [
        "# Assumption-6 audit: run-level error rates by simulation",
        "",
        f"`{meta['command']}` ({meta['seconds']:.0f} s on {meta['workers']} worker(s)). Each run streams the",
        "anchor pairs of a 400-step WMRL run (1 anchor group of 8 per step) through the real `Calibrator`",
        "and audits at every refit (~47 audits per run); a run counts as *warned* if any audit warned.",
        (f"Thresholds (`AuditThresholds()`): z > {t.z_crit} clustered by group (and by task), effect > "
         f"{t.max_monotonicity_ratio:.0%} / {t.max_stationarity_ratio:.0%} of the within-group spread of r̂,"),
        (f"per-task F test p < {t.max_task_p} with task sd ≥ {t.min_task_sd}, a warning after {t.persist} "
         "consecutive flagged audits. 95% Wilson intervals."),
        "",
        "## False warnings (stationary monotone world models: nothing should warn)",
        "",
        "| world model | seeds | runs warned | 95% CI | by check (mono/stat/task/cov) | mean ρ after warm-up |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r["kind"] != "null":
            continue
        lo, hi = r["any_warning_ci"]
        bc = "/".join(str(v) for v in r["by_check"].values())
        lines.append(f"| {r['cell']} | {r['seeds']} | {r['any_warning']} ({r['any_warning'] / r['seeds']:.1%}) | "
                     f"{lo:.1%}–{hi:.1%} | {bc} | {r['rho_mean']:.3f} |")
    null = [r for r in rows if r["kind"] == "null"]
    if null:
        k, n = sum(r["any_warning"] for r in null), sum(r["seeds"] for r in null)
        lo, hi = wilson(k, n)
        lines += ["", (f"All null runs together: {k}/{n} warned ({k / n:.1%}, 95% CI {lo:.1%}–{hi:.1%}); "
                       "target: a run-level false-warning rate ≤ 5%.")]
    lines += [
        "",
        "## Power (the named check should warn)",
        "",
        "| world model | expected check | seeds | detected | 95% CI | median step of first warning | any warning by check (mono/stat/task/cov) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r["kind"] != "power":
            continue
        lo, hi = r["detected_ci"]
        bc = "/".join(str(v) for v in r["by_check"].values())
        step = "-" if r["median_first_warning_step"] is None else f"{r['median_first_warning_step']:.0f}"
        extra = ""
        if "named_tasks" in r:
            extra = f" (named {r['named_tasks']} tasks, {r['named_correctly']} on the right side)"
        lines.append(f"| {r['cell']}{extra} | {r['expect']} | {r['seeds']} | {r['detected']} "
                     f"({r['detected'] / r['seeds']:.0%}) | {lo:.0%}–{hi:.0%} | {step} | {bc} |")
    flat = [r for r in rows if "flat_top" in r]
    if flat:
        lines += ["", "## flat_top: the world model cannot rank at the top (issue 37)", "",
                  (f"Spearman of r̂ and r among the anchor pairs with r ≥ the {t.top_quantile:.0%} quantile of the "
                   f"r > 0; flags when its group-clustered bootstrap upper bound ({1 - t.top_alpha:.0%}, "
                   f"{t.top_bootstrap} resamples) is below {t.min_top_rank}; warns after {t.persist} consecutive "
                   "flags. Counted apart from the Assumption-6 checks above (a monotone φ can be flat)."),
                  "", "| world model | should warn | seeds | flat_top warned | 95% CI |", "|---|---|---|---|---|"]
        for r in flat:
            lo, hi = wilson(r["flat_top"], r["seeds"])
            lines.append(f"| {r['cell']} | {'yes' if r['expect'] == 'flat_top' else 'no'} | {r['seeds']} | "
                         f"{r['flat_top']} ({r['flat_top'] / r['seeds']:.0%}) | {lo:.0%}–{hi:.0%} |")
    for rerun in meta.get("reruns", []):
        lines += ["", f"Re-run since, rows replaced: `{rerun['command']}` ({rerun['seconds']:.0f} s): "
                      + ", ".join(rerun["cells"]) + "."]
    for note in meta.get("notes", []):
        lines += ["", note]
    out.write_text("\n".join(lines) + "\n")


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(2, 1, figsize=(10, 8))
    null = [r for r in rows if r["kind"] == "null"]
    power = [r for r in rows if r["kind"] == "power"]
    for ax, sel, key, title in ((a, null, "any_warning", "false-warning rate (runs)"),
                                (b, power, "detected", "power (runs)")):
        rates = [r[key] / r["seeds"] for r in sel]
        err = np.array([[rate - r[f"{key}_ci"][0], r[f"{key}_ci"][1] - rate] for rate, r in zip(rates, sel, strict=True)]).T
        ax.barh(range(len(sel)), rates, xerr=err, color="tab:red" if key == "any_warning" else "tab:blue")
        ax.set_yticks(range(len(sel)), [r["cell"] for r in sel], fontsize=7)
        ax.set_xlim(0, 1)
        ax.set_title(title)
        if key == "any_warning":
            ax.axvline(0.05, color="k", ls="--", lw=1)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=40)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--cells", default="", help="comma-separated cell indices (default: all)")
    p.add_argument("--out", type=Path, default=Path("results/calibration"))
    p.add_argument("--merge", action="store_true",
                   help="replace only the --cells rows of an existing OUT/audit_error_rates.json, keep the others")
    p.add_argument("--note", action="append", default=[], help="a paragraph for the report's end (repeatable)")
    args = p.parse_args()
    chosen = [int(c) for c in args.cells.split(",") if c] or list(range(len(CELLS)))
    started = time.perf_counter()
    jobs = [(i, s) for i in chosen for s in range(args.seeds)]
    runs: dict[int, list[dict]] = {i: [] for i in chosen}
    with Pool(args.workers) as pool:
        for i, _, outcome in pool.imap_unordered(_job, jobs, chunksize=4):
            runs[i].append(outcome)
    cells = [CELLS[i] for i in chosen]
    rows = summarise(cells, {k: runs[i] for k, i in enumerate(chosen)})
    command = f"python scripts/audit_error_rates.py --seeds {args.seeds} --workers {args.workers}"
    meta = {"command": command, "seconds": time.perf_counter() - started, "workers": args.workers,
            "seeds": args.seeds, "notes": args.note}
    previous = args.out / "audit_error_rates.json"
    if args.merge and previous.exists():
        rows, meta = merge(json.loads(previous.read_text()), rows, meta, f"{command} --cells {args.cells} --merge")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "audit_error_rates.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    write_markdown(rows, args.out / "audit_error_rates.md", meta)
    plot(rows, args.out / "audit_error_rates.png")
    print((args.out / "audit_error_rates.md").read_text())


if __name__ == "__main__":
    main()
