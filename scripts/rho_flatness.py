"""Is rho flat after warm-up on a stationary world model? (issue 7, item 4)

    # measure: wmrl variant, default (stationary) world model, 20 seeds, rho at every step
    python scripts/rho_flatness.py measure --label after --out results/calibration/rho_after.json
    # the "before" curve was measured the same way with the pre-fix code on PYTHONPATH
    # (commit 7afae64: git worktree add /tmp/before 7afae64; PYTHONPATH=/tmp/before python ...)
    python scripts/rho_flatness.py plot results/calibration/rho_before.json results/calibration/rho_after.json \
        --out results/calibration/rho_flatness

Only the simulator's public ``train`` is used, so the same script measures old and new code.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np


def _train():
    try:  # the trainer moved out of wmrl/simulate in issue 7; accept both homes
        from wmrl.simulate.simulator import train
    except ImportError:  # pragma: no cover - depends on the code on PYTHONPATH
        from wmrl.trainers.synthetic import train  # type: ignore[no-redef]
    return train


def measure(label: str, seeds: int, overrides: list[str], out: Path) -> None:
    from wmrl.config import load_config

    cfg = load_config(None, ["simulator.log_every=1", *overrides])
    train = _train()
    rho, steps = [], None
    for seed in range(seeds):
        result = train(cfg, "wmrl", seed)
        steps = result.steps
        rho.append(result.history["rho"])
        print(f"{label}: seed {seed} done", file=sys.stderr)
    payload = {"label": label, "overrides": overrides, "seeds": seeds, "steps": steps, "rho": rho,
               "min_pairs": cfg.algorithm.min_pairs}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload))


def _phases(data: dict) -> dict[str, tuple[float, float]]:
    """Mean rho over seeds (with the SE over seeds) in three phases after warm-up."""
    steps, rho = np.asarray(data["steps"]), np.asarray(data["rho"], dtype=float)
    warm = int(np.argmax(np.isfinite(rho).all(axis=0) & (rho != 1.0).any(axis=0)))  # first post-warm-up step
    first = steps[warm]
    phases = {"warm-up end (first 25 steps after)": (steps >= first) & (steps < first + 25),
              "steps 100-200": (steps >= 100) & (steps < 200), "steps 200-400": steps >= 200}
    out = {}
    for name, mask in phases.items():
        per_seed = rho[:, mask].mean(axis=1)
        out[name] = (float(per_seed.mean()), float(per_seed.std(ddof=1) / np.sqrt(len(per_seed))))
    return out


def plot(files: list[Path], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = [json.loads(f.read_text()) for f in files]
    fig, ax = plt.subplots(figsize=(8, 4))
    overrides = " ".join(datasets[0]["overrides"]) or "none"
    lines = [("# rho on a stationary world model: before and after prequential residuals, and with f_hat "
              "continued beyond its end knots"), "",
             f"`wmrl` variant, simulator defaults (phi(r) = r^0.3, stationary) with the overrides `{overrides}`",
             ("(`simulator.lr=1e-9` freezes the policy: a stationary stream of anchor pairs);"
                                 if "lr=1e-9" in overrides else "(the policy learns: the score distribution moves);"),
             "rho at every step; mean over seeds of the per-seed phase mean, ± standard error over seeds.", "",
             (f"Reproduce: `python scripts/rho_flatness.py measure --label ... --out X.json "
              f"{overrides if overrides != 'none' else ''}` (the 'before' rows with commit 7afae64 on PYTHONPATH), "
              "then `... plot BEFORE.json AFTER.json ... --out ...`. The 'continued beyond its end knots' "
              "rows: commit 92ef3e3 (docs/calibration.md, 'Beyond the end knots')."), "",
             "| code | seeds | " + " | ".join(_phases(datasets[0])) + " |",
             "|---|---|" + "---|" * len(_phases(datasets[0]))]
    for data in datasets:
        steps, rho = np.asarray(data["steps"]), np.asarray(data["rho"], dtype=float)
        mean = rho.mean(axis=0)
        se = rho.std(axis=0, ddof=1) / np.sqrt(len(rho))
        ax.plot(steps, mean, label=f"{data['label']} ({len(rho)} seeds)")
        ax.fill_between(steps, mean - se, mean + se, alpha=0.25)
        cells = [f"{m:.3f} ± {s:.3f}" for m, s in _phases(data).values()]
        lines.append(f"| {data['label']} | {len(rho)} | " + " | ".join(cells) + " |")
    ax.set_xlabel("step")
    ax.set_ylabel("rho (mean over seeds, ± SE)")
    ax.legend()
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out.with_suffix(".png"), dpi=110)
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--label", required=True)
    m.add_argument("--seeds", type=int, default=20)
    m.add_argument("--out", type=Path, required=True)
    m.add_argument("overrides", nargs="*")
    q = sub.add_parser("plot")
    q.add_argument("files", type=Path, nargs="+")
    q.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    if args.cmd == "measure":
        measure(args.label, args.seeds, args.overrides, args.out)
    else:
        plot(args.files, args.out)


if __name__ == "__main__":
    main()
