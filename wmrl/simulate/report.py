"""Tables (Markdown, CSV, JSON) and plots (PNG) of a simulator sweep."""

from __future__ import annotations

import csv
import io
import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from wmrl.io import atomic_write_json, atomic_write_text, json_safe
from wmrl.simulate.config import TestbedRunConfig
from wmrl.simulate.simulator import COST_SOURCE, MAP_GRID, RunResult, audit_warned
from wmrl.simulate.sweep import SweepResult
from wmrl.simulate.world_model import SyntheticWorldModel
from wmrl.tracking.plots import save_png

COLUMNS = (
    ("variant", "variant"),
    ("final_score", "final true score"),
    ("executions", "executions"),
    ("exec_frac_of_grpo_real", "exec. vs grpo_real"),
    ("gpu_hours", "GPU-hours"),
    ("target_reached", "reached target"),
    ("executions_to_target", "executions to target"),
    ("gpu_hours_to_target", "GPU-hours to target"),
    ("rho_end", "rho (end)"),
    ("audit_warned", "audit warned"),
)


def mean_se(values: list[float]) -> tuple[float, float]:
    """Mean and standard error (sample std / sqrt(n)); SE is 0 for one value, NaN for none."""
    x = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    if len(x) == 0:
        return float("nan"), float("nan")
    return float(x.mean()), float(x.std(ddof=1) / math.sqrt(len(x))) if len(x) > 1 else 0.0


def mean_se_text(mean: float, se: float, n: int) -> str:
    """"mean ± s.e."; one seed has no error bar, so it says so instead of "± 0"."""
    return f"{mean:.4f} (1 seed)" if n == 1 else f"{mean:.4f} ± {se:.4f}"


def by_variant(runs: list[RunResult]) -> dict[str, list[RunResult]]:
    out: dict[str, list[RunResult]] = {}
    for r in runs:
        out.setdefault(r.variant, []).append(r)
    return out


def summarise(sweep: SweepResult) -> dict[str, dict[str, Any]]:
    """Per variant: mean/SE of the final true score and the cost and target statistics."""
    groups = by_variant(sweep.runs)
    real_exec = mean_se([float(r.executions) for r in groups["grpo_real"]])[0] if "grpo_real" in groups else None
    out: dict[str, dict[str, Any]] = {}
    for variant, runs in groups.items():
        final, final_se = mean_se([r.final_score for r in runs])
        reached = [r for r in runs if r.target_step is not None]
        execs = mean_se([float(r.executions) for r in runs])[0]
        audits = [r for r in runs if r.audit is not None]
        out[variant] = {
            "seeds": [r.seed for r in runs],
            "final_score": final,
            "final_score_se": final_se,
            "initial_score": mean_se([r.initial_score for r in runs])[0],
            "optimum": mean_se([r.optimum for r in runs])[0],
            "executions": execs,
            "exec_frac_of_grpo_real": (execs / real_exec) if real_exec else None,
            "gpu_hours": mean_se([r.gpu_hours for r in runs])[0],
            "target_reached": f"{len(reached)}/{len(runs)}",
            "executions_to_target": mean_se([float(r.target_executions) for r in reached])[0],  # type: ignore[arg-type]
            "gpu_hours_to_target": mean_se([r.target_gpu_hours for r in reached])[0],  # type: ignore[misc]
            "rho_end": mean_se([r.history["rho"][-1] for r in runs])[0],
            "audit_warned": f"{sum(audit_warned(r.audit) for r in audits)}/{len(audits)}" if audits else "-",
            "final_scores": [r.final_score for r in runs],
        }
    return out


def _fmt(key: str, row: dict[str, Any]) -> str:
    v = row.get(key)
    if key == "final_score":
        return f"{v:.4f} ± {row['final_score_se']:.4f}"
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if key == "exec_frac_of_grpo_real":
        return f"{100 * v:.1f}%"
    if key in ("executions", "executions_to_target"):
        return f"{v:.0f}"
    if isinstance(v, float):
        return f"{v:.1f}" if key.startswith("gpu_hours") else f"{v:.2f}"
    return str(v)


def markdown_table(summary: dict[str, dict[str, Any]]) -> str:
    head = "| " + " | ".join(title for _, title in COLUMNS) + " |"
    rule = "|" + "|".join("---" for _ in COLUMNS) + "|"
    rows = [
        "| " + " | ".join(variant if key == "variant" else _fmt(key, row) for key, _ in COLUMNS) + " |"
        for variant, row in summary.items()
    ]
    return "\n".join([head, rule, *rows])


def plot_score_vs_compute(sweep: SweepResult, target: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for variant, runs in by_variant(sweep.runs).items():
        scores = np.array([r.history["score"] for r in runs])
        hours = np.array([r.history["gpu_hours"] for r in runs]).mean(axis=0)
        mean = scores.mean(axis=0)
        se = scores.std(axis=0, ddof=1) / math.sqrt(len(runs)) if len(runs) > 1 else np.zeros_like(mean)
        (line,) = ax.plot(hours, mean, label=variant)
        ax.fill_between(hours, mean - se, mean + se, color=line.get_color(), alpha=0.2)
    ax.axhline(target, color="grey", ls=":", lw=1, label=f"target {target:g}")
    ax.set_xscale("log")
    ax.set_xlabel("compute (GPU-hours, log scale)")
    ax.set_ylabel("expected true score")
    ax.set_title("score vs compute (mean ± SE over seeds)")
    ax.legend(fontsize=8)
    save_png(fig, path)


def plot_fitted_map(sweep: SweepResult, cfg: TestbedRunConfig, path: Path) -> bool:
    """f_hat of the first wmrl (else debias_only) run against phi; False if no such run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run = next((r for v in ("wmrl", "debias_only") for r in sweep.runs if r.variant == v and r.fitted_map), None)
    if run is None:
        return False
    wm = SyntheticWorldModel(cfg.simulator)
    fig, ax = plt.subplots(figsize=(5.5, 5))
    if run.pool_sample:
        pairs = np.array(run.pool_sample)
        ax.scatter(pairs[:, 0], pairs[:, 1], s=4, alpha=0.15, color="grey", label="anchor pairs (r_hat, r)")
    r = np.linspace(0, 1, 201)
    ax.plot(wm.mean_curve(r, 0), r, color="C1", lw=2, label=f"true phi ({cfg.simulator.phi}), drawn as r vs phi(r)")
    last = cfg.train.steps - 1
    if wm.phi_at(last) != wm.phi_at(0):
        ax.plot(wm.mean_curve(r, last), r, color="C3", lw=2, ls="--", label=f"phi after drift ({cfg.simulator.drift_phi})")
    ax.plot(MAP_GRID, run.fitted_map, color="C0", lw=2, label=f"fitted f_hat ({run.variant}, seed {run.seed})")
    ax.plot([0, 1], [0, 1], color="black", lw=0.5, ls=":")
    ax.set_xlabel("world-model score r_hat")
    ax.set_ylabel("true score r")
    ax.set_title("debiasing map vs the world model's distortion")
    ax.legend(fontsize=7, loc="upper left")
    save_png(fig, path)
    return True


def plot_rho_eta(sweep: SweepResult, cfg: TestbedRunConfig, path: Path) -> bool:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = {v: rs for v, rs in by_variant(sweep.runs).items() if v in ("wmrl", "denoise_only")}
    if not groups:
        return False
    fig, (ax_rho, ax_eta) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    for variant, runs in groups.items():
        steps = runs[0].steps
        for ax, key in ((ax_rho, "rho"), (ax_eta, "eta2")):
            values = np.array([r.history[key] for r in runs], dtype=float)
            with warnings.catch_warnings():  # steps before warm-up have no eta2 in any seed
                warnings.simplefilter("ignore", RuntimeWarning)
                mean = np.nanmean(values, axis=0)
            ax.plot(steps, mean, label=variant)
    sim = cfg.simulator
    for ax in (ax_rho, ax_eta):
        for step, name in ((sim.degrade_step, "degradation"), (sim.drift_step, "drift")):
            if step is not None:
                ax.axvline(step, color="grey", ls="--", lw=1, label=name)
    ax_rho.axhline(cfg.algorithm.w_max, color="black", ls=":", lw=1, label="w_max")
    ax_rho.set_ylabel("rho (anchor weight)")
    ax_eta.set_ylabel("eta2 (normalised residual)")
    ax_eta.set_xlabel("step")
    ax_rho.set_title("inverse-variance denoising over training (mean over seeds)")
    ax_rho.legend(fontsize=8)
    save_png(fig, path)
    return True


def write_report(sweep: SweepResult, cfg: TestbedRunConfig, out: Path, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write table.md/.csv, summary.json, runs.json and the plots into ``out``; return the summary."""
    out.mkdir(parents=True, exist_ok=True)
    summary = summarise(sweep)
    meta = {
        "wall_seconds": sweep.wall_seconds,
        # CPU seconds of all runs together: on a shared machine wall time measures the neighbours too
        "cpu_seconds": float(sum(r.cpu_seconds for r in sweep.runs)),
        "load_average": list(sweep.load_average),
        "workers": sweep.workers,
        "runs": len(sweep.runs),
        "target_score": cfg.simulator.target_score,
        "cost_source": COST_SOURCE,
        **(extra or {}),
    }
    atomic_write_text(
        out / "table.md",
        f"{markdown_table(summary)}\n\n{len(sweep.runs)} runs in {sweep.wall_seconds:.1f} s wall "
        f"({sweep.workers} processes); target score {cfg.simulator.target_score:g}; "
        "final true score = mean ± standard error over seeds; GPU-hours are modelled "
        "(cost_source: modelled, priced by simulator.cost), not measured.\n",
    )
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["variant", "final_score", "final_score_se"] + [k for k, _ in COLUMNS[2:]])
    for variant, row in summary.items():
        writer.writerow([variant, row["final_score"], row["final_score_se"]] + [row[k] for k, _ in COLUMNS[2:]])
    atomic_write_text(out / "table.csv", buf.getvalue())
    atomic_write_json(out / "summary.json", json_safe({"meta": meta, "variants": summary}))
    atomic_write_json(
        out / "runs.json",
        json_safe([{k: v for k, v in vars(r).items() if k != "pool_sample"} for r in sweep.runs]),
    )
    plot_score_vs_compute(sweep, cfg.simulator.target_score, out / "score_vs_compute.png")
    plot_fitted_map(sweep, cfg, out / "fitted_map.png")
    plot_rho_eta(sweep, cfg, out / "rho_eta2.png")
    return {"meta": meta, "variants": summary}
