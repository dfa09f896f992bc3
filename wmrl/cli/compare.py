"""``wmrl compare``: a table (Markdown + CSV) and plots comparing the runs of a sweep.

    wmrl compare runs/sweeps/anchor_frac_wmax            # a sweep directory (what `wmrl sweep` printed)
    wmrl compare results/sweeps/anchor_frac_wmax         # a saved comparison (its records.jsonl)
    wmrl compare --tracking-uri http://host:5000 --parent RUN_ID   # a sweep's MLflow parent run
    wmrl compare --tracking-uri URI --runs ID,ID,...     # chosen MLflow runs
    wmrl compare --tracking-uri URI --experiment wmrl-sweeps --filter "params.simulator.phi = 'power'"

Writes compare.md, compare.csv, records.jsonl and the plots to --out (default results/sweeps/NAME),
logs them to the sweep's MLflow parent run when there is one, and prints the table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from wmrl.cli.args import add_command
from wmrl.config import ConfigError
from wmrl.io import atomic_write_text, read_json
from wmrl.sweep import records as rec
from wmrl.sweep.records import COST_METRIC, RECORDS, SCORE_METRIC, RunRecord, write_records


def register(subparsers: Any) -> None:
    p = add_command(
        subparsers, "compare", "table + plots comparing a sweep's runs (score, GPU-hours, speedup)",
        __doc__)
    p.add_argument("source", nargs="*", metavar="DIR",
                   help="a sweep directory, or a directory with records.jsonl; several are pooled, each run once "
                        "(e.g. a comparison's saved records and a later sweep that added seeds)")
    p.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (for --parent/--runs/--filter)")
    p.add_argument("--parent", default=None, metavar="RUN_ID", help="the sweep's MLflow parent run")
    p.add_argument("--runs", default=None, metavar="ID,ID", help="MLflow run ids")
    p.add_argument("--filter", default="", metavar="EXPR", help="MLflow search filter, e.g. \"params.x = 'y'\"")
    p.add_argument("--experiment", default=None, help="MLflow experiment to search (with --filter)")
    p.add_argument("--score-metric", default=SCORE_METRIC, help=f"score curve metric (default {SCORE_METRIC})")
    p.add_argument("--cost-metric", default=COST_METRIC, help=f"GPU-hours curve metric (default {COST_METRIC})")
    p.add_argument("--target", type=float, default=None, help="target score (default: from grpo_real's curve)")
    p.add_argument("--name", default=None, help="name of the comparison (default: the sweep's name)")
    p.add_argument("--out", default=None, help="output directory (default results/sweeps/NAME)")
    p.add_argument("--no-log", action="store_true", help="do not log the outputs to the MLflow parent run")
    p.set_defaults(func=run)


def _load(args: argparse.Namespace) -> tuple[list[RunRecord], str, str | None, str | None]:
    """Records, the comparison's name, and the MLflow (uri, parent run) to log the outputs to: those of
    the first source (several sources are pooled, each (setting, seed) once)."""
    if args.source:
        loaded = [_load_dir(Path(src), args) for src in args.source]
        try:
            records = rec.pool_records([(src, found[0]) for src, found in zip(args.source, loaded, strict=True)])
        except ValueError as err:
            raise ConfigError(str(err)) from None
        return records, *loaded[0][1:]
    if not args.tracking_uri or not (args.parent or args.runs or args.filter or args.experiment):
        raise ConfigError("give a DIR, or --tracking-uri with --parent RUN_ID, --runs ID,... or --filter/--experiment")
    runs = [r.strip() for r in args.runs.split(",") if r.strip()] if args.runs else None
    records = rec.from_mlflow(args.tracking_uri, parent=args.parent, run_ids=runs, filter_string=args.filter,
                              experiment=args.experiment, score_metric=args.score_metric,
                              cost_metric=args.cost_metric)
    return records, args.parent or "compare", args.tracking_uri, args.parent


def _load_dir(src: Path, args: argparse.Namespace) -> tuple[list[RunRecord], str, str | None, str | None]:
    """One DIR: a sweep directory (its runs, its MLflow parent) or a saved comparison (records.jsonl)."""
    if (src / "sweep.json").exists():
        state = read_json(src / "sweep.json")
        uri, parent = state.get("tracking_uri"), state.get("parent_run_id")
        if state.get("superseded"):  # `wmrl sweep --rerun`: only the runs that replaced them are compared
            print(f"{src}: {len(state['superseded'])} superseded run(s) left out: "
                  f"{', '.join(e['name'] + ' (' + e['why'] + ')' for e in state['superseded'])}", file=sys.stderr)
        if state.get("kind") == "launch":  # trainer runs report to MLflow only: read the parent's children
            if not (uri and parent):
                raise ConfigError(f"{src} is a launch sweep without an MLflow parent run; its runs cannot be "
                                  "compared (re-issue the sweep with tracking on)")
            return (rec.from_mlflow(uri, parent=parent, score_metric=args.score_metric,
                                    cost_metric=args.cost_metric), state["name"], uri, parent)
        return rec.from_sweep_dir(src), state["name"], uri, parent
    if (src / RECORDS).exists():
        return rec.read_records(src / RECORDS), src.name, None, None
    raise ConfigError(f"{src} is neither a sweep directory (no sweep.json) nor a saved comparison "
                      f"(no {RECORDS})")


def run(args: argparse.Namespace) -> int:
    # the sweep tables and plots only for `wmrl compare`: `wmrl --help` imports every subcommand
    from wmrl.sweep.compare import compare, csv_text, markdown
    from wmrl.sweep.compare_plots import plot_heatmaps, plot_score_vs_gpu_hours

    records, name, uri, parent = _load(args)
    if not records:
        raise ConfigError("no finished runs found to compare")
    comparison = compare(records, args.target)
    out = Path(args.out or Path("results") / "sweeps" / (args.name or name))
    out.mkdir(parents=True, exist_ok=True)
    table = markdown(comparison)
    atomic_write_text(out / "compare.md", table)
    atomic_write_text(out / "compare.csv", csv_text(comparison))
    write_records(sorted(records, key=lambda r: r.name), out / RECORDS)
    plots = [out / "score_vs_gpu_hours.png"]
    plot_score_vs_gpu_hours(comparison, plots[0])
    plots += plot_heatmaps(comparison, out)
    print(table, end="")
    print(f"wrote {out}/ (compare.md, compare.csv, {RECORDS}, {', '.join(p.name for p in plots)})", file=sys.stderr)
    if uri and parent and not args.no_log:
        from mlflow.tracking import MlflowClient

        client = MlflowClient(uri)
        for path in [out / "compare.md", out / "compare.csv", *plots]:
            client.log_artifact(parent, str(path), "compare")
        print(f"logged to MLflow parent run {parent} (artifacts/compare/)", file=sys.stderr)
    return 0
