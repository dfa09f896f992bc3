"""Plots of a run that people look at instead of reading logs: the calibration map over the anchor
pairs, and the per-step curves (score, rho, eta2). PNG files written atomically; the caller logs them
to MLflow."""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from wmrl.io import atomic_write_bytes


def _pyplot():  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")  # files only: works on headless nodes
    import matplotlib.pyplot as plt

    return plt


def save_png(fig: object, path: Path) -> None:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")  # type: ignore[attr-defined]
    atomic_write_bytes(path, buf.getvalue())
    _pyplot().close(fig)


def plot_calibration(predicted: np.ndarray, true: np.ndarray, grid: np.ndarray, fitted: np.ndarray,
                     path: Path, title: str = "calibration map f_hat over the anchor pairs") -> None:
    """Anchor pairs (r_hat, r) and the fitted map f_hat(r_hat) (Eq. 4) on ``grid``."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 5))
    keep = np.linspace(0, len(predicted) - 1, min(len(predicted), 5000)).astype(int) if len(predicted) else []
    ax.scatter(np.asarray(predicted)[keep], np.asarray(true)[keep], s=6, alpha=0.3, color="grey",
               label=f"anchor pairs ({len(predicted)})")
    ax.plot(grid, fitted, color="C0", lw=2, label="f_hat")
    ax.plot([0, 1], [0, 1], color="black", lw=0.5, ls=":", label="identity")
    ax.set(xlabel="world-model score r_hat", ylabel="true score r", xlim=(0, 1), ylim=(-0.02, 1.02), title=title)
    ax.legend(fontsize=8, loc="upper left")
    save_png(fig, path)


def plot_curves(steps: Sequence[int], curves: dict[str, Sequence[float | None]], path: Path,
                hlines: dict[str, tuple[str, float]] | None = None, title: str = "training curves") -> None:
    """One panel per curve against the step; ``hlines`` maps a curve to a labelled reference line."""
    plt = _pyplot()
    fig, axes = plt.subplots(len(curves), 1, figsize=(7, 2.2 * len(curves)), sharex=True, squeeze=False)
    for ax, (name, values) in zip(axes[:, 0], curves.items()):
        y = np.array([np.nan if v is None or not math.isfinite(v) else v for v in values], dtype=float)
        ax.plot(steps, y, marker="." if len(steps) < 50 else None)
        ax.set_ylabel(name)
        if hlines and name in hlines:
            label, value = hlines[name]
            ax.axhline(value, color="black", ls=":", lw=1, label=label)
            ax.legend(fontsize=8)
    axes[-1, 0].set_xlabel("step")
    axes[0, 0].set_title(title)
    save_png(fig, path)
