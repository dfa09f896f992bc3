"""Build the built-in pool: write each task's files, run its reference solutions, make its leaderboard.

The reference solutions are trusted code (written by this module), so the build runs them in-process
with ``DATA_DIR``/``SUBMISSION_PATH`` set; agents' code only ever runs in the sandbox. Every output is
a function of the package versions only: the same build writes the same bytes.
"""

from __future__ import annotations

import contextlib
import io
import json
import multiprocessing
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pandas as pd
from threadpoolctl import threadpool_limits

from wmrl.grading.leaderboard import BUILTIN_TIE_TOLERANCE, Leaderboard
from wmrl.grading.metrics import MAXIMIZE, get_metric
from wmrl.grading.validate import answers_matrix, validate_submission
from wmrl.io import atomic_write_text, share_with_group
from wmrl.progress import progress_display
from wmrl.tasks.builtin.refcode import make_code
from wmrl.tasks.builtin.spec import TaskData

BUILTIN_VERSION = "builtin-v2"
MIN_REFERENCES = 50  # the leaderboard is made of the references' real scores only
_FLOAT = "%.6g"


def family_registry() -> dict[str, Callable[[], TaskData]]:
    # Pillow, scikit-image and statsmodels, only when the built-in pool is built
    from wmrl.tasks.builtin import images, tabular, text

    out: dict[str, Callable[[], TaskData]] = {}
    for module in (tabular, images, text):
        for family in module.FAMILIES:
            out[family.__name__] = family
    return out


def _write_csv(path: Path, frame: pd.DataFrame, float_format: str | None = _FLOAT) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(frame.to_csv(index=False, float_format=float_format, lineterminator="\n"), encoding="utf-8")


def describe(data: TaskData) -> str:
    metric = get_metric(data.metric)
    better = "higher is better" if metric.direction == MAXIMIZE else "lower is better"
    columns = ", ".join(f"`{c}`" for c in data.sample_submission.columns)
    what = {
        "label": f"the predicted `{data.target}` label",
        "value": f"the predicted value of `{data.target}`",
        "prob_binary": f"the predicted probability that `{data.target}` is 1",
        "prob_multi": f"one predicted probability per class of `{data.target}`",
    }[data.output]
    notes = "\n".join(f"- {note}" for note in data.data_notes)
    return (
        f"# {data.name}\n\n{data.summary}\n\n## Evaluation\n\n"
        f"Submissions are evaluated with **{metric.name}** ({better}) against the hidden labels of the test set.\n\n"
        f"## Data\n\n- `{data.train_file}`: training rows with the target `{data.target}`.\n"
        f"- `{data.test_file}`: test rows without the target; predict one row per `{data.id_column}`.\n"
        f"- `sample_submission.csv`: a valid submission in the required format.\n{notes}\n\n"
        f"## Submission\n\nA CSV file with the columns {columns}: the test `{data.id_column}` and {what}.\n"
    )


@contextlib.contextmanager
def _contract_env(public_dir: Path, submission: Path) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in ("DATA_DIR", "SUBMISSION_PATH")}
    os.environ["DATA_DIR"], os.environ["SUBMISSION_PATH"] = str(public_dir), str(submission)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def run_reference(code: str, filename: str, public_dir: Path, submission: Path) -> None:
    """Run a trusted reference solution in-process, its output swallowed."""
    # One thread, as in the sandbox (sandbox.threads=1): scores do not depend on the machine's cores.
    with _contract_env(public_dir, submission), contextlib.redirect_stdout(io.StringIO()), threadpool_limits(1):
        exec(compile(code, filename, "exec"), {"__name__": "__main__"})  # noqa: S102 - our own code


def check_variants(data: TaskData, minimum: int = MIN_REFERENCES) -> None:
    """Enough uniquely named references to make a leaderboard from their scores alone."""
    names = [v.name for v in data.variants]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"{data.task_id}: duplicate reference names {duplicates}")
    if len(names) < minimum:
        raise ValueError(f"{data.task_id}: {len(names)} references; the leaderboard needs at least {minimum}")


def write_leaderboard(path: Path, entries: list[tuple[float, str]], direction: str) -> Leaderboard:
    ordered = sorted(entries, key=lambda e: (-e[0] if direction == MAXIMIZE else e[0], e[1]))
    frame = pd.DataFrame({"rank": range(1, len(ordered) + 1), "score": [round(s, 6) for s, _ in ordered],
                          "source": [src for _, src in ordered]})
    # Scores keep all 6 decimals (not 6 significant digits): an entry equals its reference's raw
    # score, so re-running that reference ties its own entry (BUILTIN_TIE_TOLERANCE).
    _write_csv(path, frame, float_format=None)
    return Leaderboard.from_scores(frame["score"].tolist(), direction, BUILTIN_TIE_TOLERANCE)


def write_public(data: TaskData, public: Path) -> None:
    """What a solution sees in DATA_DIR: the description, both CSVs, the sample submission, extra files."""
    public.mkdir(parents=True)
    (public / "description.md").write_text(describe(data), encoding="utf-8")
    _write_csv(public / data.train_file, data.train)
    _write_csv(public / data.test_file, data.test)
    _write_csv(public / "sample_submission.csv", data.sample_submission)
    for relative, payload in sorted(data.files.items()):
        (public / relative).parent.mkdir(parents=True, exist_ok=True)
        (public / relative).write_bytes(payload)


def build_task(data: TaskData, task_dir: Path, scratch: Path, version: str = BUILTIN_VERSION,
               min_references: int = MIN_REFERENCES) -> dict:
    public, private, reference = task_dir / "public", task_dir / "private", task_dir / "reference"
    write_public(data, public)
    _write_csv(private / "answers.csv", data.answers)
    metric = get_metric(data.metric)
    answers = pd.read_csv(private / "answers.csv", dtype={data.id_column: str})
    targets = tuple(data.sample_submission.columns[1:])
    y_true = answers_matrix(answers, targets, metric)
    check_variants(data, min_references)
    reference.mkdir(parents=True)
    raw: dict[str, float] = {}
    for variant in data.variants:
        code = make_code(data, variant)
        (reference / f"{variant.name}.py").write_text(code, encoding="utf-8")
        submission = scratch / f"{data.task_id}-{variant.name}.csv"
        run_reference(code, f"{variant.name}.py", public, submission)
        check = validate_submission(submission, answers, data.id_column, targets, metric)
        if not check.valid:
            raise RuntimeError(f"{data.task_id}: reference {variant.name} wrote an invalid submission: {check.reason}")
        raw[variant.name] = round(metric(y_true, check.y_pred), 6)
    entries = [(s, f"reference:{n}") for n, s in raw.items()]
    board = write_leaderboard(private / "leaderboard.csv", entries, metric.direction)
    index = {"solutions": [
        {"name": v.name, "file": f"{v.name}.py", "raw_score": raw[v.name], "weak": v.weak,
         "position_score": round(board.position_score(raw[v.name]), 6),
         "note": f"model={v.model} params={json.dumps(v.params, sort_keys=True)} features={v.features} "
                 f"fraction={v.fraction}" + (" shuffled-labels" if v.shuffle_labels else "")}
        for v in data.variants
    ]}
    (reference / "index.json").write_text(json.dumps(index, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    meta = {"task_id": data.task_id, "name": data.name, "metric": data.metric, "direction": metric.direction,
            "category": data.category, "split": data.split, "source": data.source, "version": version}
    (task_dir / "task.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    # Defence in depth: the sandbox runs under a fresh uid and only ever gets public/ bound, but
    # even a mistaken bind of private/ must not let it read the answers.
    private.chmod(0o700)
    return meta


# Task id of each family (what `wmrl tasks list` shows): `--only` accepts either name. Kept in sync
# with the families by tests/test_tasks_builtin.py (building a family just to learn its id takes seconds).
TASK_IDS: dict[str, str] = {
    "breast_cancer": "breast-cancer-diagnosis", "wine": "wine-cultivar", "diabetes": "diabetes-progression",
    "synthetic_classification": "synthetic-multiclass", "friedman": "friedman-regression",
    "hastie": "hastie-binary", "affairs": "marriage-affairs", "anes_party": "anes96-party",
    "digits_png": "digits-png", "digits_noisy_zip": "digits-noisy-zip", "lfw_faces": "lfw-face-detection",
    "shapes": "noisy-shapes", "topics": "news-topics", "sentiment": "review-sentiment", "rating": "review-rating",
}
# Present in every task directory the build wrote: only those are ever replaced by a rebuild.
MARKER = ".wmrl-built"
POOL_INDEX = "pool.json"


class ForeignDirectory(ValueError):
    """The build would have to replace or remove files that wmrl did not create."""


def resolve_families(names: Sequence[str] | None) -> list[str]:
    """Family names for ``--only`` values that are family names (``wine``) or task ids (``wine-cultivar``)."""
    registry = family_registry()
    if not names:
        return list(registry)
    by_id = {task_id: family for family, task_id in TASK_IDS.items()}
    out, unknown = [], []
    for name in names:
        family = name if name in registry else by_id.get(name)
        if family is None:
            unknown.append(name)
        elif family not in out:
            out.append(family)
    if unknown:
        allowed = ", ".join(f"{f} ({TASK_IDS.get(f, '?')})" for f in registry)
        raise ValueError(f"unknown built-in task {unknown}; allowed: a family or its task id: {allowed}")
    return out


def is_wmrl_task(task_dir: Path) -> bool:
    """Whether ``task_dir`` was written by this build (the marker; pools built before it: task.json)."""
    if (task_dir / MARKER).is_file():
        return True
    try:
        return str(json.loads((task_dir / "task.json").read_text())["version"]).startswith("builtin-")
    except (OSError, ValueError, KeyError, TypeError):
        return False


def check_root(root: Path, task_ids: Sequence[str]) -> None:
    """Refuse a root that is neither new, empty nor a wmrl pool, and task directories wmrl did not make."""
    if root.exists() and not root.is_dir():
        raise ForeignDirectory(f"{root} is a file, not a directory; choose another --root")
    if not root.is_dir():
        return
    entries = sorted(p.name for p in root.iterdir() if not p.name.startswith(".tmp-"))
    if entries and POOL_INDEX not in entries and not any(is_wmrl_task(root / e) for e in entries):
        shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
        raise ForeignDirectory(
            f"{root} is not empty and is not a wmrl task pool (it holds {shown}); wmrl never replaces files it "
            "did not create: build into a new or empty directory")
    foreign = [t for t in task_ids if (root / t).exists() and not is_wmrl_task(root / t)]
    if foreign:
        raise ForeignDirectory(
            f"{root}: {', '.join(foreign)} exist(s) but were not built by wmrl (no {MARKER}); move them away "
            "or build into another directory")


def _replace_task(staged: Path, target: Path) -> None:
    """Swap one freshly built task directory in (two renames; the old copy is removed afterwards)."""
    old = target.with_name(f".tmp-old-{target.name}.{os.getpid()}")
    if target.exists():
        os.replace(target, old)
    os.replace(staged, target)
    shutil.rmtree(old, ignore_errors=True)


def _write_index(root: Path, metas: list[dict], version: str = BUILTIN_VERSION, extra: dict | None = None,
                 keep_previous: bool = True) -> None:
    """pool.json lists every wmrl-built task of the root: the old entries (``keep_previous``), updated by
    this build. ``extra``: more keys for pool.json (the task families' cache key)."""
    try:
        previous = json.loads((root / POOL_INDEX).read_text())["tasks"] if keep_previous else []
    except (OSError, ValueError, KeyError, TypeError):
        previous = []
    tasks = {t["task_id"]: t for t in previous if isinstance(t, dict) and "task_id" in t
             and (root / t["task_id"]).is_dir()}
    tasks.update({m["task_id"]: {k: m[k] for k in ("task_id", "split", "category", "metric")} for m in metas})
    pool = {**(extra or {}), "version": version, "tasks": [tasks[k] for k in sorted(tasks)]}
    atomic_write_text(root / POOL_INDEX, json.dumps(pool, indent=1, sort_keys=True) + "\n")


def build_pool(root: Path, only: Sequence[str] | None = None, progress: bool = True,
               group: str = "", workers: int = 0) -> list[dict]:
    """Build the pool (or the families / task ids in ``only``) into ``root``.

    Tasks are built in a sibling temp directory, then each one replaces only its own task directory
    (one marked as built by wmrl); everything else in ``root`` (a user's notes, an MLE-Dojo copy, the
    tasks not in ``only``) is left alone. A non-empty directory that is not a wmrl pool is refused.
    ``group``: the Unix group that shares the pool (:func:`wmrl.io.share_with_group`).
    """
    registry = family_registry()
    makers = [(TASK_IDS.get(name, name), name, registry[name]) for name in resolve_families(only)]
    return build_tasks(Path(root), makers, progress=progress, group=group, workers=workers)


def build_workers() -> int:
    """Processes a build uses by default: one per core this process may run on (a reference fits on
    one thread), at most 8 (a login node's cores are shared)."""
    return max(1, min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


def _build_marked(family: str, make: Callable[[], TaskData], staging: Path, scratch: Path, version: str,
                  min_references: int) -> dict:
    """Build one task into ``staging`` and mark it as wmrl's (only marked tasks are ever replaced)."""
    data = make()
    meta = build_task(data, staging / data.task_id, scratch, version, min_references)
    (staging / data.task_id / MARKER).write_text(
        json.dumps({"built_by": "wmrl tasks build", "family": family, "version": version}, sort_keys=True) + "\n",
        encoding="utf-8")
    return meta


def _build_marked_job(job: tuple) -> dict:
    return _build_marked(*job)


def build_tasks(root: Path, makers: Sequence[tuple[str, str, Callable[[], TaskData]]], *, progress: bool = True,
                group: str = "", version: str = BUILTIN_VERSION, min_references: int = MIN_REFERENCES,
                index_extra: dict | None = None, replace_pool: bool = False, workers: int = 0) -> list[dict]:
    """Build ``makers`` (``(task_id, family, make)``) into ``root`` as :func:`build_pool` describes.

    ``workers``: tasks built at once, each in its own process (0 = :func:`build_workers`); ``make``
    must then be picklable (a module-level function or a bound method of a plain dataclass).

    ``replace_pool``: the new tasks are the whole pool; wmrl-built tasks of an earlier build that are
    not among them are removed (a task-family pool built again with fewer instances).
    """
    check_root(root, [task_id for task_id, _, _ in makers])
    root.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".tmp-{root.name}.", dir=root.parent))
    metas = []
    try:
        with tempfile.TemporaryDirectory(prefix="wmrl-build-") as scratch:
            jobs = [(family, make, staging, Path(scratch), version, min_references) for _, family, make in makers]
            workers = min(workers or build_workers(), len(jobs))
            bar = progress_display(len(makers), "building tasks", "task", show=None if progress else False)
            try:
                if workers <= 1:
                    for job in jobs:
                        metas.append(_build_marked(*job))
                        bar.update(1)
                else:
                    # spawn, not fork: the caller may hold torch's OpenMP threads, which a forked child
                    # fitting scikit-learn models could deadlock on. Each task is its own seeded job, so
                    # the bytes written do not depend on the number of workers.
                    context = multiprocessing.get_context("spawn")
                    with ProcessPoolExecutor(workers, mp_context=context) as pool:
                        for meta in pool.map(_build_marked_job, jobs):
                            metas.append(meta)
                            bar.update(1)
            finally:
                bar.close()
        check_root(root, [m["task_id"] for m in metas])  # another process may have written meanwhile
        root.mkdir(parents=True, exist_ok=True)
        if group:
            share_with_group(root, group)
        for meta in metas:
            _replace_task(staging / meta["task_id"], root / meta["task_id"])
        if replace_pool:
            built = {m["task_id"] for m in metas}
            for stale in sorted(p for p in root.iterdir()
                                if p.is_dir() and not p.name.startswith(".") and p.name not in built and is_wmrl_task(p)):
                shutil.rmtree(stale)
        _write_index(root, metas, version, index_extra, keep_previous=not replace_pool)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return metas
