"""``wmrl simulate``: the synthetic WMRL testbed, variants x seeds, table + plots in ``--out``.

    wmrl simulate                                   # defaults, all 7 variants x 5 seeds
    wmrl simulate simulator.phi=bump simulator.wm_noise=0.2 --variants wmrl,mixture --seeds 5
    wmrl simulate configs/simulate.yaml --scenario degrade
    wmrl simulate --scenario all                    # every scenario (scripts/simulate_report.py: REPORT.md)
    wmrl simulate --from-run runs/tiny              # plan a sweep: the grid on the simulator fitted to a run
    wmrl simulate --from-run runs/tiny --anchor-fracs 0.1,0.4 --w-maxes 2,8 --seeds 2 simulator.crash_slope=0.3
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

from wmrl.cli.args import IntermixedParser, add_config_args, split_config_args
from wmrl.config import VARIANTS, ConfigError, WMRLConfig, load_config, to_flat_dict
from wmrl.io import atomic_write_text, json_safe
from wmrl.simulate.scenarios import SCENARIOS, get_scenario
from wmrl.sweep.records import RECORDS, from_result, write_records

RUNS = "runs"  # OUT/runs/VARIANT-seedSEED: one directory per (variant, seed)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("simulate", help="synthetic WMRL testbed: variants x seeds, table and plots")
    p.__class__ = IntermixedParser  # the dispatcher builds plain parsers; this one takes overrides anywhere
    add_config_args(p)
    p.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated (default: all 7)")
    p.add_argument("--seeds", type=int, default=None, help="seeds 0..N-1 (default 5; with --from-run 3)")
    p.add_argument(
        "--out", default=None,
        help="output directory (default: RUNS_ROOT/simulate/RUN_NAME; with --scenario: results/simulate)",
    )
    p.add_argument(
        "--scenario", default=None, help=f"named overrides: {', '.join(SCENARIOS)}, or 'all'"
    )
    p.add_argument("--workers", type=int, default=2, help="parallel processes (default 2)")
    plan = p.add_argument_group("planning a sweep from a real run (docs/sweeps.md)")
    plan.add_argument("--from-run", default=None, metavar="RUN_DIR",
                      help="fit the simulator to this run's anchor pairs and measured costs, then run the grid; "
                           "key=value overrides apply after the fit (default --out: plans/RUN_NAME)")
    plan.add_argument("--anchor-fracs", default="0.05,0.1,0.2,0.4", help="grid of algorithm.anchor_frac")
    plan.add_argument("--w-maxes", default="1,2,4,8", help="grid of algorithm.w_max")
    plan.add_argument("--min-pairs", type=int, default=None,
                      help="anchor pairs a fit needs at least (default 30)")
    p.set_defaults(func=run)


def _track(cfg: WMRLConfig, scenario: str, results: list[Any], out: Path, plots: list[Path]) -> None:
    """Each (variant, seed) is a run directory ``out/runs/VARIANT-seedSEED`` with its resolved config and
    its tracking outbox, sent from this process only (one SQLite writer); ``records.jsonl`` lets
    ``wmrl compare OUT`` read the runs without MLflow."""
    import dataclasses

    # the synthetic testbed only for `wmrl simulate`: `wmrl --help` imports every subcommand
    from wmrl.simulate.tracking import prepare_run_dir, send_runs, write_run

    records, run_dirs = [], []
    for r in results:
        run_cfg = dataclasses.replace(cfg, algorithm=dataclasses.replace(cfg.algorithm, variant=r.variant, seed=r.seed))
        run_dir = run_directory(out, r.variant, r.seed)
        result = json_safe({k: v for k, v in vars(r).items() if k != "pool_sample"})
        records.append(from_result(run_dir.name, dataclasses.asdict(run_cfg.algorithm), result))
        prepare_run_dir(run_dir, run_cfg)  # its config.yaml: `wmrl sync` and `wmrl simulate --from-run` read it
        if cfg.tracking.enabled:
            tags = {"wmrl.kind": "simulate", "wmrl.scenario": scenario, "wmrl.variant": r.variant,
                    "wmrl.cost_source": r.cost_source, "wmrl.run_dir": str(run_dir.absolute())}
            write_run(run_dir, run_cfg, result, f"sim-{scenario}-{r.variant}-s{r.seed}", tags,
                      [(plot, "plots") for plot in plots if plot.exists()])
            run_dirs.append(run_dir)
    write_records(records, out / RECORDS)
    sent, failure = send_runs(run_dirs, cfg)
    if failure is not None:
        print(f"tracking store {cfg.tracking.uri} failed ({failure.error}); {len(run_dirs) - sent} run(s) keep "
              f"their records in {out}/runs/*/tracking: send them later with `wmrl sync RUN_DIR`", file=sys.stderr)


def run_directory(out: Path, variant: str, seed: int) -> Path:
    """A run's directory: its calibration files (``pool_directory(out/runs, ...)`` of the simulator trainer
    names it the same), its config and its tracking."""
    return Path(out) / RUNS / f"{variant}-seed{seed}"


def run_one(cfg: WMRLConfig, scenario: str, variants: list[str], seeds: int, out: Path, workers: int) -> dict[str, Any]:
    # the synthetic testbed only for `wmrl simulate`: `wmrl --help` imports every subcommand
    from wmrl.simulate.report import write_report
    from wmrl.simulate.sweep import run_sweep

    sweep = run_sweep(cfg, variants, range(seeds), workers=workers, desc=f"simulate[{scenario}]",
                      pool_root=out / RUNS)
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
    _track(cfg, scenario, sweep.runs, out, plots)
    report["meta"]["tracking_seconds"] = time.perf_counter() - started
    return report


def run(args: argparse.Namespace) -> int:
    config, overrides = split_config_args(args.args)
    try:
        variants = [v.strip() for v in args.variants.split(",") if v.strip()]
        # the synthetic testbed only for `wmrl simulate`: `wmrl --help` imports every subcommand
        from wmrl.simulate.sweep import check_variants

        check_variants(variants)
        names = list(SCENARIOS) if args.scenario == "all" else [args.scenario] if args.scenario else []
        for name in names:
            get_scenario(name)
    except ValueError as err:
        raise ConfigError(str(err)) from err
    if args.from_run:
        return run_from_run(args, config, overrides, variants)
    args.seeds = 5 if args.seeds is None else args.seeds
    if args.seeds < 1 or args.workers < 1:
        raise ConfigError("--seeds and --workers must be >= 1")
    started = time.perf_counter()
    if not names:
        cfg = load_config(config, overrides)
        out = Path(args.out) if args.out else Path(cfg.runs_root) / "simulate" / cfg.run_name
        run_one(cfg, "custom", variants, args.seeds, out, args.workers)
        print((out / "table.md").read_text(), end="")
        print(f"wrote {out}/ (table.md, table.csv, summary.json, runs.json, records.jsonl, *.png, runs/)",
              file=sys.stderr)
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


def _floats(flag: str, text: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"{flag}={text!r}: expected comma-separated numbers, e.g. 0.05,0.1,0.2") from None
    if not values:
        raise ConfigError(f"{flag} is empty")
    return values


def run_from_run(args: argparse.Namespace, config: str | None, overrides: list[str], variants: list[str]) -> int:
    """``--from-run``: fit, run the grid, print the fitted parameters and the predicted table, then the
    anchor rule's check: the simulator run as the run was configured, its per-step anchor groups against the
    run's."""
    # the synthetic testbed only for `wmrl simulate`: `wmrl --help` imports every subcommand
    from wmrl.sweep.from_run import MIN_PAIRS, FromRunError, fit_run, fitted_config, load_run
    from wmrl.sweep.plan import grid, run_plan, write_plan
    from wmrl.sweep.rule_trace import check_rule

    if config is not None:
        raise ConfigError(f"--from-run takes its config from RUN_DIR/config.yaml; got a config file too ({config}); "
                          "pass key=value overrides instead")
    if args.scenario:
        raise ConfigError("--from-run and --scenario do not combine: the run is the scenario")
    seeds = 3 if args.seeds is None else args.seeds
    if seeds < 1 or args.workers < 1:
        raise ConfigError("--seeds and --workers must be >= 1")
    fracs, maxes = _floats("--anchor-fracs", args.anchor_fracs), _floats("--w-maxes", args.w_maxes)
    run_dir = Path(args.from_run)
    try:
        evidence = load_run(run_dir)
        fit = fit_run(evidence, MIN_PAIRS if args.min_pairs is None else args.min_pairs)
    except FromRunError as err:
        raise ConfigError(str(err)) from None
    cfg = fitted_config(evidence, fit, overrides)
    for key, values in (("anchor_frac", fracs), ("w_max", maxes)):
        for value in values:  # the grid's values must be valid config values too
            dataclasses.replace(cfg.algorithm, **{key: value}).validate()
    settings = grid(cfg, variants, fracs, maxes)
    records, wall = run_plan(cfg, settings, range(seeds), workers=args.workers)
    out = Path(args.out) if args.out else Path("plans") / run_dir.resolve().name
    agreement = check_rule(cfg, fit.rule, range(seeds), workers=args.workers)
    meta = {"overrides": overrides, "seeds": seeds, "anchor_fracs": fracs, "w_maxes": maxes, "variants": variants,
            "wall_seconds": wall, "steps": cfg.train.steps, "simulator": to_flat_dict(cfg.simulator),
            "anchor_rule_check": json_safe(dataclasses.asdict(agreement))}
    _, text = write_plan(out, fit, records, wall, meta)
    text += "\n" + agreement.describe()
    atomic_write_text(out / "plan.md", text)
    print(text, end="")
    print(f"wrote {out}/ (plan.md, plan.csv, fit.json, records.jsonl, *.png)", file=sys.stderr)
    return 0
