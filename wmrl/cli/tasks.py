"""``wmrl tasks build|list|show``: build the built-in pool, list a pool, describe one task.

Every action takes ``--config`` and ``key=value`` overrides like the other commands
(``wmrl tasks list tasks.root=/data/mle-dojo tasks.competitions_dir=~/MLE-Dojo/mledojo/competitions``);
``--root`` is short for ``tasks.root=``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from wmrl.cli.args import IntermixedParser
from wmrl.config import WMRLConfig, load_config
from wmrl.tasks.builtin.build import build_pool
from wmrl.tasks.layouts import LoadOptions
from wmrl.tasks.overview import task_overview
from wmrl.tasks.pool import default_pool_root, find_task, resolve_pool_root, scan_pool
from wmrl.tasks.task import TaskError


def _common(parser: argparse.ArgumentParser, root_help: str) -> None:
    parser.__class__ = IntermixedParser  # overrides may come before or after options
    parser.add_argument("--root", help=root_help + " (same as tasks.root=DIR)")
    parser.add_argument("--config", help="run config YAML (reads the tasks section)")
    parser.add_argument("overrides", nargs="*", default=[], metavar="key=value", help="config overrides")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("tasks", help="build, list and show task pools")
    sub = parser.add_subparsers(dest="tasks_command", required=True, metavar="ACTION")

    build = sub.add_parser("build", help="build the built-in pool, or the task families (tasks.pool=families)")
    build.add_argument("--only", nargs="+", metavar="FAMILY",
                       help="build only these task families (built-in pool) or families/instance ids (task families)")
    build.add_argument("--group", default="", metavar="GROUP",
                       help="Unix group that shares the pool (setgid on the root; rights follow the umask)")
    build.add_argument("--workers", type=int, default=0, metavar="N",
                       help="tasks built at once, one process each (default: one per core, at most 8)")
    _common(build, "where to build (default: tasks.root, $WMRL_TASKS_DIR or ~/.cache/wmrl/...)")

    listing = sub.add_parser("list", help="list the tasks of a pool; broken ones are reported, not hidden")
    listing.add_argument("--split", choices=("all", "train", "heldout"), default="all")
    _common(listing, "pool root (default: the built-in pool, built on first use)")

    show = sub.add_parser("show", help="describe one task: metadata, leaderboard, references, overview")
    show.add_argument("task", help="task id in the pool, or a task directory")
    show.add_argument("--no-overview", action="store_true", help="skip the agent's task overview")
    _common(show, "pool root (default: the built-in pool)")
    parser.set_defaults(func=run)


def _config(args: argparse.Namespace) -> WMRLConfig:
    overrides = list(args.overrides) + ([f"tasks.root={args.root}"] if args.root else [])
    return load_config(args.config, overrides)


def _root(cfg: WMRLConfig) -> Path:
    """An explicit tasks.root is used as is; otherwise the pool tasks.pool names, built if missing."""
    return resolve_pool_root(cfg.tasks, progress=True)


def run(args: argparse.Namespace) -> int:
    cfg = _config(args)
    try:
        if args.tasks_command == "build":
            return _build(args, cfg)
        if args.tasks_command == "list":
            return _list(args, cfg)
        return _show(args, cfg)
    except TaskError as err:
        print(f"wmrl tasks: {err}", file=sys.stderr)
        return 2


def _build(args: argparse.Namespace, cfg: WMRLConfig) -> int:
    if cfg.tasks.pool == "families":
        # Pillow and scikit-image, only for the task families
        from wmrl.tasks.families.pool import build_families, default_root

        families = cfg.tasks.families
        root = Path(cfg.tasks.root).expanduser() if cfg.tasks.root else default_root(families)
        metas = build_families(root, families, only=args.only, group=args.group, workers=args.workers)
        heldout = sum(m["split"] == "heldout" for m in metas)
        print(f"built {len(metas)} task(s) ({len(metas) - heldout} train, {heldout} held out) in {root}")
        return 0
    root = default_pool_root(cfg.tasks.root)
    metas = build_pool(root, only=args.only, group=args.group, workers=args.workers)
    print(f"built {len(metas)} task(s) in {root}")
    return 0


def _list(args: argparse.Namespace, cfg: WMRLConfig) -> int:
    root = _root(cfg)
    tasks, broken = scan_pool(root, split=args.split, options=LoadOptions.from_config(cfg.tasks))
    print(f"{'task':28} {'layout':8} {'split':8} {'category':9} {'metric':16} {'dir':4} {'board':>5} {'refs':>4}")
    for t in tasks:
        print(f"{t.task_id:28} {t.layout:8} {t.split:8} {t.category:9} {t.metric_name:16} {t.direction:4} "
              f"{len(t.leaderboard):5d} {len(t.reference_solutions()):4d}")
    if broken:
        print(f"\n{len(broken)} task director{'y' if len(broken) == 1 else 'ies'} in {root} could not be loaded "
              "(skipped):")
        for path, error in broken:
            print(f"  {path.name}: {error}")
    return 1 if broken else 0


def _show(args: argparse.Namespace, cfg: WMRLConfig) -> int:
    task = find_task(_root(cfg), args.task, LoadOptions.from_config(cfg.tasks))
    board = task.leaderboard
    print(f"task:        {task.task_id} ({task.name})")
    print(f"layout:      {task.layout}   split: {task.split}   category: {task.category}")
    print(f"metric:      {task.metric_name} ({'higher' if task.direction == 'max' else 'lower'} is better)")
    print(f"public dir:  {task.public_dir}")
    print(f"private dir: {task.private_dir}")
    print(f"leaderboard: {len(board)} entries, best {board.scores[0]:.6g}, worst {board.scores[-1]:.6g}")
    if task.public_leaderboard is not None:
        public = task.public_leaderboard
        used = "averaged with the private one" if task.rules.boards == "mean" else "not used (boards: private)"
        print(f"public board: {len(public)} entries, {used}")
    rules = task.rules
    print(f"grading:     ties {'exact' if not rules.tie_tolerance else f'within {rules.tie_tolerance:g} (relative)'}"
          + (f", score rounded to {rules.round_digits} decimals" if rules.round_digits is not None else "")
          + (", medals and above-median flags" if rules.medals else ""))
    refs = task.reference_solutions()
    if refs:
        print("reference solutions (weakest first): name, raw score, position score")
        for ref in refs:
            print(f"  {ref.name:26} {ref.raw_score:10.6g} {ref.position_score:6.3f}{'  (weak)' if ref.weak else ''}")
    if not args.no_overview:
        print("\n" + task_overview(task))
    return 0
