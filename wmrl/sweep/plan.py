"""Planning a sweep before paying for it: the anchor_frac x w_max grid on the simulator fitted to a run.

Each variant gets the axes that change it (as in ``sweeps/anchor_frac_wmax.yaml``): ``w_max`` only
matters with denoising, ``anchor_frac`` only to variants that draw anchor groups besides world-model
groups; the other axes stay at the run's values. Every setting runs ``seeds`` seeds of the fitted
simulator; the table is ``wmrl compare``'s (predicted final score ± SE over seeds, predicted compute from
the run's measured seconds per unit of work), so it reads like the real sweep's table and
``scripts/check_plan.py`` can set the two side by side.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wmrl.algorithm import get_variant
from wmrl.config import WMRLConfig
from wmrl.io import atomic_write_json, atomic_write_text, json_safe
from wmrl.simulate.sweep import run_jobs
from wmrl.sweep.compare import Comparison, compare, csv_text, markdown
from wmrl.sweep.compare_plots import plot_heatmaps, plot_score_vs_gpu_hours
from wmrl.sweep.from_run import Fit
from wmrl.sweep.records import RunRecord, from_result, write_records

ANCHOR_FRACS = (0.05, 0.1, 0.2, 0.4)
W_MAXES = (1.0, 2.0, 4.0, 8.0)


@dataclass(frozen=True)
class Setting:
    variant: str
    anchor_frac: float
    w_max: float

    @property
    def name(self) -> str:
        return f"{self.variant}_anchor_frac={self.anchor_frac:g}_w_max={self.w_max:g}"


def grid(cfg: WMRLConfig, variants: Sequence[str], anchor_fracs: Sequence[float] = ANCHOR_FRACS,
         w_maxes: Sequence[float] = W_MAXES) -> list[Setting]:
    """The settings worth running: each variant over the axes that change what it does."""
    alg = cfg.algorithm
    out = []
    for name in variants:
        v = get_variant(name)
        fracs = anchor_fracs if v.needs_anchors and not v.all_anchor else (alg.anchor_frac,)
        maxes = w_maxes if v.denoise else (alg.w_max,)
        out += [Setting(name, float(a), float(w)) for a in fracs for w in maxes]
    return out


def run_plan(cfg: WMRLConfig, settings: Sequence[Setting], seeds: Sequence[int], workers: int = 2,
             progress: bool | None = None) -> tuple[list[RunRecord], float]:
    """Every (setting, seed) on the fitted simulator; the runs as ``wmrl compare`` records, and the wall time."""
    jobs, names = [], []
    for s in settings:
        alg = dataclasses.replace(cfg.algorithm, anchor_frac=s.anchor_frac, w_max=s.w_max)
        for seed in seeds:
            jobs.append((dataclasses.replace(cfg, algorithm=alg), s.variant, int(seed), None))
            names.append((s, int(seed)))
    sweep = run_jobs(jobs, workers, progress=progress, desc="plan")
    records = []
    for (s, seed), result in zip(names, sweep.runs):
        alg = {"variant": s.variant, "seed": seed, "anchor_frac": s.anchor_frac, "w_max": s.w_max}
        data = json_safe({k: v for k, v in vars(result).items() if k != "pool_sample"})
        records.append(from_result(f"{s.name}_s{seed}", alg, data))
    return records, sweep.wall_seconds


def write_plan(out: Path, fit: Fit, records: list[RunRecord], wall_seconds: float, meta: dict[str, Any],
               ) -> tuple[Comparison, str]:
    """plan.md (fitted parameters + predicted table), plan.csv (``wmrl compare``'s columns), fit.json,
    records.jsonl (``wmrl compare OUT`` re-reads it) and the comparison's plots; returns the text."""
    out.mkdir(parents=True, exist_ok=True)
    comparison = compare(records)
    seeds = len({r.seed for r in records})
    text = (
        f"# Predicted sweep from {fit.run_dir}\n\n{fit.describe()}\n\n"
        f"## Prediction ({len(records)} simulated runs of {meta['steps']} steps, {seeds} seed(s) each, "
        f"{wall_seconds:.1f} s wall)\n\n"
        "Final score = the simulator's expected true score at the end (mean ± SE over seeds); GPU-hours = "
        f"the fitted seconds per unit of work ({fit.cost_source}) summed over the run: CPU-hours when the "
        "run was measured on CPUs.\n\n" + markdown(comparison)
    )
    atomic_write_text(out / "plan.md", text)
    atomic_write_text(out / "plan.csv", csv_text(comparison))
    atomic_write_json(out / "fit.json", json_safe({**fit.to_dict(), "meta": meta}))
    write_records(records, out / "records.jsonl")
    plot_score_vs_gpu_hours(comparison, out / "score_vs_gpu_hours.png")
    plot_heatmaps(comparison, out)
    return comparison, text
