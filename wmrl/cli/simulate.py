"""``wmrl simulate``: the synthetic WMRL testbed, variants x seeds, table + plots in ``--out``.

    wmrl simulate                                   # defaults, all 7 variants x 5 seeds
    wmrl simulate simulator.phi=bump simulator.wm_noise=0.2 --variants wmrl,mixture --seeds 5
    wmrl simulate configs/simulate.yaml --scenario degrade
    wmrl simulate --scenario all                    # every scenario (scripts/simulate_report.py: REPORT.md)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from wmrl.cli.args import IntermixedParser, split_config_args
from wmrl.config import VARIANTS, ConfigError, WMRLConfig, load_config, to_flat_dict
from wmrl.simulate.scenarios import SCENARIOS, get_scenario


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("simulate", help="synthetic WMRL testbed: variants x seeds, table and plots")
    p.__class__ = IntermixedParser  # the dispatcher builds plain parsers; this one takes overrides anywhere
    p.add_argument("args", nargs="*", metavar="[CONFIG] [key=value ...]", help="YAML config, then overrides")
    p.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated (default: all 7)")
    p.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1 (default 5)")
    p.add_argument(
        "--out", default=None,
        help="output directory (default: RUNS_ROOT/simulate/RUN_NAME; with --scenario: results/simulate)",
    )
    p.add_argument(
        "--scenario", default=None, help=f"named overrides: {', '.join(SCENARIOS)}, or 'all'"
    )
    p.add_argument("--workers", type=int, default=2, help="parallel processes (default 2)")
    p.set_defaults(func=run)


def _track(cfg: WMRLConfig, scenario: str, results: list[Any], plots: list[Path]) -> None:
    """One MLflow run per (variant, seed), logged from this process only (one SQLite writer)."""
    if not cfg.tracking.enabled:
        return
    from wmrl.tracking.tracker import Tracker

    params = to_flat_dict(cfg)
    for r in results:
        run_params = {**params, "algorithm.variant": r.variant, "algorithm.seed": r.seed, "simulate.scenario": scenario}
        tags = {"wmrl.kind": "simulate", "wmrl.scenario": scenario, "wmrl.variant": r.variant,
                "wmrl.cost_source": r.cost_source}
        with Tracker(cfg.tracking, run_name=f"sim-{scenario}-{r.variant}-s{r.seed}", params=run_params, tags=tags) as t:
            t.log_history({f"sim/{k}": v for k, v in r.history.items()}, r.steps)
            t.log_metrics(
                {"final/score": r.final_score, "final/executions": r.executions, "final/gpu_hours": r.gpu_hours},
                step=r.steps[-1],
            )
            for plot in plots:
                if plot.exists():
                    t.log_artifact(plot, "plots")


def run_one(cfg: WMRLConfig, scenario: str, variants: list[str], seeds: int, out: Path, workers: int) -> dict[str, Any]:
    from wmrl.simulate.report import write_report
    from wmrl.simulate.sweep import run_sweep

    sweep = run_sweep(cfg, variants, range(seeds), workers=workers, desc=f"simulate[{scenario}]",
                      pool_root=out / "pools")
    extra = {
        "scenario": scenario,
        "out": str(out),
        "degrade_step": cfg.simulator.degrade_step,
        "drift_step": cfg.simulator.drift_step,
        "w_max": cfg.algorithm.w_max,
        "config": to_flat_dict(cfg),
    }
    report = write_report(sweep, cfg, out, extra=extra)
    plots = [out / n for n in ("score_vs_compute.png", "fitted_map.png", "rho_eta2.png")]
    started = time.perf_counter()
    _track(cfg, scenario, sweep.runs, plots)
    report["meta"]["tracking_seconds"] = time.perf_counter() - started
    return report


def run(args: argparse.Namespace) -> int:
    config, overrides = split_config_args(args.args)
    try:
        variants = [v.strip() for v in args.variants.split(",") if v.strip()]
        from wmrl.simulate.sweep import check_variants

        check_variants(variants)
        names = list(SCENARIOS) if args.scenario == "all" else [args.scenario] if args.scenario else []
        for name in names:
            get_scenario(name)
    except ValueError as err:
        raise ConfigError(str(err)) from err
    if args.seeds < 1 or args.workers < 1:
        raise ConfigError("--seeds and --workers must be >= 1")
    started = time.perf_counter()
    if not names:
        cfg = load_config(config, overrides)
        out = Path(args.out) if args.out else Path(cfg.runs_root) / "simulate" / cfg.run_name
        run_one(cfg, "custom", variants, args.seeds, out, args.workers)
        print((out / "table.md").read_text(), end="")
        print(f"wrote {out}/ (table.md, table.csv, summary.json, runs.json, *.png)", file=sys.stderr)
        return 0
    out = Path(args.out or "results/simulate")
    for name in names:
        cfg = load_config(config, [*get_scenario(name).overrides, *overrides])
        target = out / name if len(names) > 1 else out
        run_one(cfg, name, variants, args.seeds, target, args.workers)
        print(f"## {name}\n{(target / 'table.md').read_text()}")
    if args.scenario == "all":
        print(f"{len(names)} scenarios in {time.perf_counter() - started:.1f} s; the Must-show report: "
              f"python scripts/simulate_report.py {out}", file=sys.stderr)
    return 0
