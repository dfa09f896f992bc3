"""Plots of a comparison: score vs GPU-hours per variant, and heatmaps of score and of cost over
anchor_frac x w_max (one figure per variant that varies both)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from wmrl.sweep.compare import Comparison, Setting
from wmrl.tracking.plots import _pyplot, save_png


def plot_score_vs_gpu_hours(c: Comparison, path: Path) -> None:
    """Every setting's final (GPU-hours, score ± SE), and the mean curve of each variant's best setting."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    variants = list(dict.fromkeys(s.variant for s in c.settings))
    for i, variant in enumerate(variants):
        mine = [s for s in c.settings if s.variant == variant]
        color = f"C{i % 10}"
        ax.errorbar([s.gpu_hours for s in mine], [s.score for s in mine], yerr=[s.score_se for s in mine],
                    fmt="o", ms=4, color=color, alpha=0.7, label=f"{variant} ({len(mine)} setting(s))")
        best = max(mine, key=lambda s: s.score)
        if len(best.curve_score):
            ax.plot(best.curve_hours, best.curve_score, color=color, lw=1, alpha=0.8)
    if c.target is not None:
        ax.axhline(c.target, color="grey", ls=":", lw=1, label=f"target {c.target:.3f}")
    ax.set_xscale("log")
    ax.set(xlabel=f"{c.unit}-hours (log scale)", ylabel="score",
           title=f"final score (mean ± SE over seeds) vs {c.unit}-hours; lines: each variant's best setting")
    ax.legend(fontsize=7, loc="lower right")
    save_png(fig, path)


def _grid(settings: list[Setting], value: str) -> tuple[list[float], list[float], np.ndarray]:
    fracs = sorted({s.anchor_frac for s in settings})
    wmaxes = sorted({s.w_max for s in settings})
    grid = np.full((len(wmaxes), len(fracs)), np.nan)
    for s in settings:
        grid[wmaxes.index(s.w_max), fracs.index(s.anchor_frac)] = getattr(s, value)
    return fracs, wmaxes, grid


def plot_heatmaps(c: Comparison, directory: Path) -> list[Path]:
    """``heatmap_<variant>.png`` (score and GPU-hours over anchor_frac x w_max) for each variant whose
    settings vary both."""
    plt = _pyplot()
    written = []
    for variant in dict.fromkeys(s.variant for s in c.settings):
        mine = [s for s in c.settings if s.variant == variant]
        if len({s.anchor_frac for s in mine}) < 2 or len({s.w_max for s in mine}) < 2:
            continue
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
        for ax, (value, title, cmap) in zip(axes, (("score", "final score (mean over seeds)", "viridis"),
                                                    ("gpu_hours", f"{c.unit}-hours (mean over seeds)", "magma_r"))):
            fracs, wmaxes, grid = _grid(mine, value)
            im = ax.imshow(grid, origin="lower", cmap=cmap, aspect="auto")
            for (row, col), v in np.ndenumerate(grid):
                if math.isfinite(v):
                    ax.text(col, row, f"{v:.3f}" if value == "score" else f"{v:.0f}", ha="center", va="center",
                            fontsize=8, color="white" if value == "score" else "black")
            ax.set_xticks(range(len(fracs)), [f"{f:g}" for f in fracs])
            ax.set_yticks(range(len(wmaxes)), [f"{w:g}" for w in wmaxes])
            ax.set(xlabel="anchor_frac", ylabel="w_max", title=f"{variant}: {title}")
            fig.colorbar(im, ax=ax)
        path = directory / f"heatmap_{variant}.png"
        save_png(fig, path)
        written.append(path)
    return written
