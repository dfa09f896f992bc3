"""``wmrl tasks build|list|show``: build the built-in pool, list a pool, describe one task."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from wmrl.config import load_config
from wmrl.tasks.pool import default_pool_root, ensure_builtin_pool, find_task, load_pool
from wmrl.tasks.task import TaskError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("tasks", help="build, list and show task pools")
    sub = parser.add_subparsers(dest="tasks_command", required=True, metavar="ACTION")

    build = sub.add_parser("build", help="build the built-in pool (deterministic)")
    build.add_argument("--root", help="where to build (default: tasks.root, $WMRL_TASKS_DIR or ~/.cache/wmrl/...)")
    build.add_argument("--only", nargs="+", metavar="FAMILY", help="build only these task families")
    build.add_argument("--config", help="run config YAML (reads tasks.root)")

    listing = sub.add_parser("list", help="list the tasks of a pool")
    listing.add_argument("--root", help="pool root (default: the built-in pool, built on first use)")
    listing.add_argument("--split", choices=("all", "train", "heldout"), default="all")
    listing.add_argument("--config", help="run config YAML (reads tasks.root)")

    show = sub.add_parser("show", help="describe one task: metadata, leaderboard, references, overview")
    show.add_argument("task", help="task id in the pool, or a task directory")
    show.add_argument("--root", help="pool root (default: the built-in pool)")
    show.add_argument("--config", help="run config YAML (reads tasks.root)")
    show.add_argument("--no-overview", action="store_true", help="skip the agent's task overview")
    parser.set_defaults(func=run)


def _root(args: argparse.Namespace) -> Path:
    """An explicit --root (or tasks.root) is used as is; otherwise the built-in pool, built if missing."""
    configured = args.root or (load_config(args.config).tasks.root if getattr(args, "config", None) else "")
    if configured:
        return Path(configured).expanduser()
    return ensure_builtin_pool()


def run(args: argparse.Namespace) -> int:
    try:
        if args.tasks_command == "build":
            return _build(args)
        if args.tasks_command == "list":
            return _list(args)
        return _show(args)
    except TaskError as err:
        print(f"wmrl tasks: {err}", file=sys.stderr)
        return 2


def _build(args: argparse.Namespace) -> int:
    from wmrl.tasks.builtin.build import build_pool

    configured = args.root or (load_config(args.config).tasks.root if args.config else "")
    root = default_pool_root(configured)
    metas = build_pool(root, only=args.only)
    print(f"built {len(metas)} task(s) in {root}")
    return 0


def _list(args: argparse.Namespace) -> int:
    tasks = load_pool(_root(args), split=args.split)
    print(f"{'task':28} {'split':8} {'category':9} {'metric':9} {'dir':4} {'board':>5} {'refs':>4}")
    for t in tasks:
        direction = "max" if t.direction == "max" else "min"
        print(f"{t.task_id:28} {t.split:8} {t.category:9} {t.metric_name:9} {direction:4} "
              f"{len(t.leaderboard):5d} {len(t.reference_solutions()):4d}")
    return 0


def _show(args: argparse.Namespace) -> int:
    from wmrl.tasks.overview import task_overview

    task = find_task(_root(args), args.task)
    board = task.leaderboard
    print(f"task:        {task.task_id} ({task.name})")
    print(f"layout:      {task.layout}   split: {task.split}   category: {task.category}")
    print(f"metric:      {task.metric_name} ({'higher' if task.direction == 'max' else 'lower'} is better)")
    print(f"public dir:  {task.public_dir}")
    print(f"private dir: {task.private_dir}")
    print(f"leaderboard: {len(board)} entries, best {board.scores[0]:.6g}, worst {board.scores[-1]:.6g}")
    refs = task.reference_solutions()
    if refs:
        print("reference solutions (weakest first): name, raw score, position score")
        for ref in refs:
            print(f"  {ref.name:26} {ref.raw_score:10.6g} {ref.position_score:6.3f}{'  (weak)' if ref.weak else ''}")
    if not args.no_overview:
        print("\n" + task_overview(task))
    return 0
