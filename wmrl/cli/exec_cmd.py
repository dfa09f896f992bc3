"""``wmrl exec TASK SOLUTION.py``: run one solution in the sandbox, grade it, print the agent's feedback."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from wmrl.config import load_config
from wmrl.execution.outcome import execute_and_grade
from wmrl.sandbox import limits_from_config, make_backend
from wmrl.tasks.layouts import LoadOptions
from wmrl.tasks.pool import find_task, resolve_pool_root
from wmrl.tasks.task import TaskError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("exec", help="run a solution on a task in the sandbox and grade it")
    parser.add_argument("task", help="task id in the pool, or a task directory")
    parser.add_argument("solution", help="Python file that reads DATA_DIR and writes SUBMISSION_PATH")
    parser.add_argument("--root", help="pool root (default: tasks.root, else the built-in pool)")
    parser.add_argument("--config", help="run config YAML (sandbox and tasks sections)")
    parser.add_argument("--backend", choices=("bwrap", "apptainer", "subprocess"), help="override sandbox.backend")
    parser.add_argument("--timeout", type=float, help="override sandbox.timeout_s (seconds)")
    parser.add_argument("--work-root", default=None, help="where work dirs are created (default: system temp)")
    parser.add_argument("--keep-work-dir", action="store_true", help="keep the work dir for inspection")
    parser.add_argument("--json", action="store_true", help="print the whole outcome as JSON")
    parser.add_argument("overrides", nargs="*", default=[], help="config overrides key=value")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import tempfile


    overrides = list(args.overrides)
    if args.backend:
        overrides.append(f"sandbox.backend={args.backend}")
    if args.timeout is not None:
        overrides.append(f"sandbox.timeout_s={args.timeout}")
    cfg = load_config(args.config, overrides)
    solution = Path(args.solution)
    if not solution.is_file():
        print(f"wmrl exec: solution file not found: {solution}", file=sys.stderr)
        return 2
    try:
        root = resolve_pool_root(args.root or cfg.tasks, progress=True)
        task = find_task(root, args.task, LoadOptions.from_config(cfg.tasks))
    except TaskError as err:
        print(f"wmrl exec: {err}", file=sys.stderr)
        return 2
    backend = make_backend(cfg.sandbox)
    limits = limits_from_config(cfg.sandbox)
    work_root = Path(args.work_root) if args.work_root else Path(tempfile.gettempdir()) / "wmrl-exec"
    outcome = execute_and_grade(
        task, solution.read_text(encoding="utf-8", errors="replace"), backend, limits, work_root,
        max_submission_bytes=int(cfg.tasks.max_submission_mb * (1 << 20)), keep_work_dir=args.keep_work_dir,
    )
    if args.json:
        print(json.dumps(outcome.to_dict(), indent=1, sort_keys=True, default=str))
    else:
        print(outcome.feedback, end="")
    return 0 if outcome.grade.valid else 1
