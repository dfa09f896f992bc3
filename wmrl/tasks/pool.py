"""Task pools: a directory of task directories (any layout); the built-in pool and the task-family pool,
built on first use."""

from __future__ import annotations

import fcntl
import json
import multiprocessing
import os
from collections.abc import Callable
from pathlib import Path

from wmrl.tasks.builtin.build import BUILTIN_VERSION, build_pool
from wmrl.tasks.config import FamiliesConfig, TasksConfig
from wmrl.tasks.layouts import LoadOptions, detect_layout, load_task
from wmrl.tasks.task import SPLITS, Task, TaskError

ENV_VAR = "WMRL_TASKS_DIR"


def default_pool_root(configured: str | Path | None = None) -> Path:
    """``tasks.root`` if set, else ``$WMRL_TASKS_DIR``, else ``~/.cache/wmrl/tasks/<BUILTIN_VERSION>``."""
    if configured:
        return Path(configured).expanduser()
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR]).expanduser()
    return Path.home() / ".cache" / "wmrl" / "tasks" / BUILTIN_VERSION


def _task_dirs(root: Path) -> list[Path]:
    return [child for child in sorted(root.iterdir())
            if child.is_dir() and not child.name.startswith(".") and detect_layout(child) is not None]


def scan_pool(root: Path, split: str | None = None, options: LoadOptions | Path | str | None = None,
              ) -> tuple[list[Task], list[tuple[Path, str]]]:
    """Every task below ``root`` that loads (sorted by id), and ``(directory, error)`` for each that
    does not: one broken competition must not hide the others (``wmrl tasks list`` shows both)."""
    root = Path(root)
    if split not in (None, "all", *SPLITS):
        raise TaskError(f"split={split!r}; allowed: all, {', '.join(SPLITS)}")
    if not root.is_dir():
        raise TaskError(f"task pool not found: {root} (build the built-in one with `wmrl tasks build --root {root}`)")
    opts = LoadOptions.coerce(options)
    tasks: list[Task] = []
    broken: list[tuple[Path, str]] = []
    dirs = _task_dirs(root)
    if not dirs:
        raise TaskError(f"{root}: holds no task directories (wmrl, MLE-bench or MLE-Dojo layout)")
    for child in dirs:
        try:
            tasks.append(load_task(child, opts))
        except TaskError as err:
            broken.append((child, str(err)))
    if split not in (None, "all"):
        tasks = [t for t in tasks if t.split == split]
    return sorted(tasks, key=lambda t: t.task_id), broken


def load_pool(root: Path, split: str | None = None, options: LoadOptions | Path | str | None = None) -> list[Task]:
    """Every task below ``root`` (sorted by id), optionally only those of ``split``.

    Training needs the whole pool it was configured with, so a broken task is an error here (the
    first one, naming its file); ``scan_pool`` reports and skips instead.
    """
    tasks, broken = scan_pool(root, split, options)
    if broken:
        more = f" (and {len(broken) - 1} more broken task(s); `wmrl tasks list` shows all)" if len(broken) > 1 else ""
        raise TaskError(broken[0][1] + more)
    return tasks


def find_task(root: Path, task_id: str, options: LoadOptions | Path | str | None = None) -> Task:
    """The task called ``task_id`` in the pool at ``root``; a path to a task directory also works."""
    opts = LoadOptions.coerce(options)
    candidate = Path(task_id)
    if candidate.is_dir() and detect_layout(candidate) is not None:
        return load_task(candidate, opts)
    direct = Path(root) / task_id
    if direct.is_dir() and detect_layout(direct) is not None:
        return load_task(direct, opts)
    tasks, broken = scan_pool(root, None, opts)
    for task in tasks:
        if task.task_id == task_id:
            return task
    names = ", ".join(t.task_id for t in tasks)
    skipped = f"; {len(broken)} broken task(s) skipped (see `wmrl tasks list`)" if broken else ""
    raise TaskError(f"no task {task_id!r} in {root}; tasks: {names}{skipped}")


def _pool_complete(root: Path) -> bool:
    try:
        return json.loads((root / "pool.json").read_text())["version"] == BUILTIN_VERSION
    except (OSError, ValueError, KeyError):
        return False


def resolve_pool_root(configured: TasksConfig | str | Path | None, progress: bool = False) -> Path:
    """The pool a run uses: ``tasks.root`` as given when set, else the pool ``tasks.pool`` names (the
    built-in one, or the task families), built on first use. ``configured``: the ``tasks`` section, or
    just its root (then the built-in pool is the default)."""
    if isinstance(configured, TasksConfig):
        if configured.root:
            return Path(configured.root).expanduser()
        if configured.pool == "families":
            return ensure_families_pool(configured.families, progress=progress)
        return ensure_builtin_pool(None, progress=progress)
    return Path(configured).expanduser() if configured else ensure_builtin_pool(None, progress=progress)


def ensure_pool(tasks: TasksConfig, progress: bool = True) -> Path:
    """The pool ``tasks.pool`` names, built first if missing: into ``tasks.root`` when set, else into its
    cache directory (what SFT builds from)."""
    if tasks.pool == "families":
        return ensure_families_pool(tasks.families, tasks.root or None, progress=progress)
    return ensure_builtin_pool(tasks.root or None, progress=progress)


def _build_once(root: Path, complete: Callable[[Path], bool], build: Callable[[Path], object]) -> Path:
    """``root``, built first by ``build`` unless ``complete``.

    A file lock next to the pool keeps two processes (e.g. array tasks starting together on shared
    storage) from building at once; the loser waits and then finds the pool complete.
    """
    if complete(root):
        return root
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        # A build's worker is starting (spawn) and re-running the caller's script, which asks for the pool
        # again: it would wait for ever on the lock its parent holds while the parent waits for it.
        raise RuntimeError(
            f"the task pool {root} is being built by this process's parent, whose script asks for it again "
            "in each build worker: put the script's code under `if __name__ == \"__main__\":` (a build "
            "starts its workers with multiprocessing's spawn, which re-runs the main module)")
    root.parent.mkdir(parents=True, exist_ok=True)
    lock_path = root.with_name(f".{root.name}.lock")
    with open(lock_path, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not complete(root):
                build(root)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return root


def ensure_builtin_pool(root: str | Path | None = None, progress: bool = True, only: list[str] | None = None) -> Path:
    """Return the built-in pool's root, building it first if it is missing (under a lock: :func:`_build_once`).

    ``only`` builds a subset of the families (tests); the result then counts as the complete pool.
    """
    return _build_once(default_pool_root(root), _pool_complete,
                       lambda where: build_pool(where, only=only, progress=progress))


def ensure_families_pool(cfg: FamiliesConfig, root: str | Path | None = None, progress: bool = True) -> Path:
    """Return the task-family pool of ``cfg`` (``root``, else its cache directory keyed by what makes it),
    building it first if it is missing or was made by other code or another config."""
    # Pillow and scikit-image, only for the task families
    from wmrl.tasks.families.pool import build_families, default_root, pool_complete

    return _build_once(Path(root).expanduser() if root else default_root(cfg), lambda where: pool_complete(where, cfg),
                       lambda where: build_families(where, cfg, progress=progress))
