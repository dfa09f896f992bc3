"""What tracking costs `wmrl simulate`: the old direct MLflow logging vs the outbox (issue 11 item 1).

Runs the default `wmrl simulate` (7 variants x 5 seeds) once, then logs its 35 runs into a fresh SQLite
store twice: with the old ``Tracker`` (taken from git at ``--old-commit``, exactly as `wmrl simulate`
called it) and through the runs' outboxes (``wmrl.cli.simulate._track``, what it does now). Reports the
wall and CPU seconds of each (the machine is shared: CPU seconds are the steadier figure).

    python benchmarks/bench_simulate_tracking.py [--old-commit 91cbd28] [--seeds 5]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _old_tracker(commit: str, tmp: Path):  # type: ignore[no-untyped-def]
    source = subprocess.run(["git", "-C", str(REPO), "show", f"{commit}:wmrl/tracking/tracker.py"],
                            capture_output=True, text=True, check=True).stdout
    path = tmp / "old_tracker.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("old_tracker", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.Tracker


def _log_old(Tracker, cfg, results, plots) -> None:  # type: ignore[no-untyped-def]
    """`wmrl simulate`'s _track before the outbox (commit 91cbd28), verbatim but for the import."""
    from wmrl.config import to_flat_dict

    params = to_flat_dict(cfg)
    for r in results:
        run_params = {**params, "algorithm.variant": r.variant, "algorithm.seed": r.seed, "simulate.scenario": "custom"}
        tags = {"wmrl.kind": "simulate", "wmrl.scenario": "custom", "wmrl.variant": r.variant,
                "wmrl.cost_source": r.cost_source}
        with Tracker(cfg.tracking, run_name=f"sim-custom-{r.variant}-s{r.seed}", params=run_params, tags=tags) as t:
            t.log_history({f"sim/{k}": v for k, v in r.history.items()}, r.steps)
            t.log_metrics({"final/score": r.final_score, "final/executions": r.executions,
                           "final/gpu_hours": r.gpu_hours}, step=r.steps[-1])
            for plot in plots:
                t.log_artifact(plot, "plots")


def _timed(fn) -> dict[str, float]:  # type: ignore[no-untyped-def]
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return {"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old-commit", default="91cbd28")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--reps", type=int, default=2, help="old and new alternate this many times")
    parser.add_argument("--out", default=str(REPO / "results" / "bench_simulate_tracking"))
    args = parser.parse_args()

    import dataclasses

    from mlflow.tracking import MlflowClient  # importing MLflow costs both the same: not measured

    from wmrl.cli.simulate import _track
    from wmrl.config import VARIANTS, load_config
    from wmrl.simulate.report import write_report
    from wmrl.simulate.sweep import run_sweep

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        cfg = load_config(None, [])
        sweep = run_sweep(cfg, VARIANTS, range(args.seeds), workers=2, pool_root=tmp / "sim" / "runs", progress=False)
        write_report(sweep, cfg, tmp / "sim")
        plots = [tmp / "sim" / n for n in ("score_vs_compute.png", "fitted_map.png", "rho_eta2.png")]
        Tracker = _old_tracker(args.old_commit, tmp)
        old, new = [], []
        for rep in range(args.reps):  # alternating: the neighbours' load drifts during the benchmark
            old_cfg = dataclasses.replace(cfg, tracking=dataclasses.replace(cfg.tracking, uri=f"sqlite:///{tmp}/old{rep}.db"))
            new_cfg = dataclasses.replace(cfg, tracking=dataclasses.replace(cfg.tracking, uri=f"sqlite:///{tmp}/new{rep}.db"))
            for c in (old_cfg, new_cfg):  # creating the database tables is not what is measured
                MlflowClient(c.tracking.uri).search_experiments()
            old.append(_timed(lambda c=old_cfg: _log_old(Tracker, c, sweep.runs, plots)))
            new.append(_timed(lambda c=new_cfg: _track(c, "custom", sweep.runs, tmp / "sim", plots)))
    result = {"runs": len(sweep.runs), "simulate_wall_s": sweep.wall_seconds, "old_tracker": old, "outbox": new,
              "old_commit": args.old_commit, "load_average": os.getloadavg()[0]}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    rows = "".join(f"| {name} | {i + 1} | {t['wall_s']:.1f} | {t['cpu_s']:.1f} |\n"
                   for i in range(args.reps) for name, t in ((f"old direct Tracker ({args.old_commit})", old[i]),
                                                              ("outbox per run (now)", new[i])))
    table = (f"# Tracking cost of `wmrl simulate` ({len(sweep.runs)} runs, default config)\n\n"
             "Each logs the 35 runs into its own fresh SQLite store (created before timing).\n\n"
             "| logging | rep | wall s | CPU s (this process) |\n|---|---|---|---|\n" + rows +
             f"\nThe 35 runs themselves: {sweep.wall_seconds:.1f} s wall on 2 processes; 1-minute load average at "
             f"the end {result['load_average']:.1f} on 2 cores (shared machine: CPU seconds are the steadier "
             "figure). Command: `python benchmarks/bench_simulate_tracking.py`.\n")
    out.with_suffix(".md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
