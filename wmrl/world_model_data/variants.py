"""Reference solutions and broken variants of them, with their REALLY executed outcomes.

The tiny world model learns its JSON from what really happens (``wmrl/sft/data.py``), and is measured
against it (``benchmarks/eval_world_model.py``). A variant is a reference solution with one realistic
mistake; its outcome comes from running it in the sandbox once, cached by content hash, so a rerun
costs nothing and a changed sandbox or code reruns only what changed. The unmodified references are
not rerun: their scores come from the real runs the task's leaderboard was built from.

Mutations (each applies only where its anchor line exists; the outcome, not the name, is the label):

==================  =====================================================================
wrong_column        the target column or one feature name misspelt (KeyError)
missing_import      the model's ``from sklearn... import`` line removed (NameError)
not_installed       ``import lightgbm as lgb`` added (missing where the sandbox lacks it)
wrong_file          the test file misnamed: ``test.csv`` read as ``test_data.csv``, any other name
                    (``test_features.csv``) as ``test.csv`` (FileNotFoundError)
crash               the training labels or test features cut short (ValueError at fit/predict)
invalid_submission  the submission frame without its first row, or its id column renamed
foreign_target      the submission's target column named as another task's (``"positive"`` for
                    ``"topic"``): the agent's own mistake, not in the SFT recipe (see below)
policy_sample       not a mutation: a solution the SFT policy wrote (``wmrl.world_model_data.examples.policy_samples``)
==================  =====================================================================

The file and column a mistake misnames are the task's own (:func:`solution_names`): the task families
vary the test file's name and the id column (``unlabeled_test.csv``, ``row_id``).

``AGENT_MISTAKES`` are kinds mined from the rollout records of the tiny sweep (every executed
trajectory of its six runs, tallied by error): 262 of its 299 failures are certain to the static
pre-check (NameErrors of a model class imported under another name, syntax errors of a cut reply),
so a run never asks the world model about them; of the 37 it leaves, the largest group is a submission
whose target column is another task's (the policy splices one task's ending onto another's code).
They feed the executed-solution memory only: the world model's SFT keeps ``MUTATIONS`` (the recipe
its hash names).

A reference is *held out* (never in the world model's SFT data nor in the memory) when a hash of its
name falls in the held-out fraction; every reference of a held-out task is held out. The policy's SFT
picks its references of the training tasks without looking at this (``sft.references_per_task``), so
the world model's evaluation takes other ones (``benchmarks/eval_world_model.py``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from wmrl.execution.outcome import execute_and_grade
from wmrl.io import atomic_write_json
from wmrl.progress import progress_display
from wmrl.rollout import content_key
from wmrl.sandbox import ExecutionStalled

MUTATIONS = ("wrong_column", "missing_import", "not_installed", "wrong_file", "crash", "invalid_submission")
AGENT_MISTAKES = ("foreign_target",)
REFERENCE = "reference"
STALL_ATTEMPTS = 3  # tries of an execution the machine held back past its wall limit (ExecutionStalled)
POLICY_SAMPLE = "policy_sample"
# Target columns of the bundled tasks' submissions: what a spliced-in ending of another task names.
_TARGET_NAMES = ("target", "positive", "topic", "digit", "malignant", "label", "had_affair", "party")
_TARGET = re.compile(r'^(y_train = train\[")([^"]+)("\].*)$', re.MULTILINE)
_FEATURES = re.compile(r"^FEATURES = \[('[^']+')", re.MULTILINE)
_MODEL_IMPORT = re.compile(r"^from sklearn\.\w+(\.\w+)? import .*\n", re.MULTILINE)
# The built-in pool's bookkeeping docstring, first line of every reference: its name, task and, for some,
# "(deliberately weak)", a label the agent never writes (wmrl/tasks/builtin/refcode.py, HEADER).
_HEADER = re.compile(r'^"""Reference solution .*"""\n', re.MULTILINE)


@dataclass(frozen=True)
class SolutionVariant:
    """A reference solution, unchanged or with one mistake (``kind``): an example the world model learns
    and is measured on; not an algorithm variant (``wmrl.algorithm.Variant``)."""

    task_id: str
    reference: str  # the reference solution's name
    kind: str  # "reference", "policy_sample" or one of MUTATIONS + AGENT_MISTAKES
    code: str
    heldout: bool
    reference_score: float  # the unmodified reference's real position score (its quality)
    quality_only: bool = False  # SFT: only the quality check is trained on it (it runs; the rest pass)

    @property
    def key(self) -> str:
        return content_key(self.task_id, self.code)


@dataclass
class Outcome:
    """What really happened when the variant ran (the fields a world-model verdict is derived from)."""

    status: str  # sandbox status: ok, error, timeout, memory, disk_quota, killed
    valid: bool
    score: float  # position score r (0 when invalid)
    error_type: str | None
    error_line: int | None
    error_text: str  # the tail of the traceback, or why the submission is invalid
    stdout: str
    seconds: float
    source: str  # "executed" or "leaderboard" (the reference's recorded real run)
    # the executed program's CPU time (its sandbox's); None for an outcome cached before it was recorded
    cpu_seconds: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SolutionNames:
    """The task's names that the mistakes misspell: the test file a solution reads, the submission's id column."""

    test_file: str = "test.csv"
    id_column: str = "id"


def solution_names(task: Any) -> SolutionNames:
    """``task``'s test file and id column (the built-in tasks: ``test.csv``, ``id``)."""
    return SolutionNames(_test_file(Path(task.public_dir), Path(task.sample_submission_path), task.id_column),
                         task.id_column)


@functools.lru_cache(maxsize=1024)
def _test_file(public_dir: Path, sample_submission: Path, id_column: str) -> str:
    """The public CSV whose ids are the sample submission's (the default name when none is)."""
    def ids(path: Path) -> set[str] | None:
        try:
            return set(pd.read_csv(path, usecols=[id_column], dtype=str)[id_column])
        except (OSError, ValueError):  # no such column, not a CSV
            return None

    wanted = ids(sample_submission)
    for path in sorted(public_dir.glob("*.csv")):
        if path != sample_submission and wanted and ids(path) == wanted:
            return path.name
    return SolutionNames.test_file


def _submission(code: str, id_column: str) -> re.Match[str] | None:
    """The one-line submission of a reference: ``pd.DataFrame({"<id>": test_ids, ...}).to_csv(SUBMISSION_PATH...``."""
    pattern = rf'^(pd\.DataFrame\(\{{"{re.escape(id_column)}": test_ids, [^}}]+\}}\))(\.to_csv\(SUBMISSION_PATH.*)$'
    return re.search(pattern, code, re.MULTILINE)


def _misspelt(name: str) -> str:
    return name.upper() if name.upper() != name else name.lower()


def clean_reference(code: str) -> str:
    """The reference's code as the agent would write it, without the pool's bookkeeping docstring: what
    the policy's SFT, the executed-solution memory and the world model's evaluation see of a reference.
    (The world model's own SFT examples keep it: their bytes name the committed SFT build.)"""
    return _HEADER.sub("", code, count=1).lstrip("\n")


def mutate(code: str, kind: str, rng: np.random.Generator, names: SolutionNames = SolutionNames()) -> str | None:
    """The variant of ``code`` with mistake ``kind`` on the task's ``names``; None when the reference has no
    anchor for it."""
    if kind == "wrong_column":
        target, features = _TARGET.search(code), _FEATURES.search(code)
        if features is not None and (target is None or rng.random() < 0.5):
            name = features.group(1)
            return code.replace(name, name[:-1] + "_x'", 1)
        if target is not None:
            column = target.group(2)
            wrong = column.capitalize() if column.capitalize() != column else column + "s"
            return code[: target.start(2)] + wrong + code[target.end(2):]
        return None
    if kind == "missing_import":
        found = list(_MODEL_IMPORT.finditer(code))
        if not found:
            return None
        line = found[int(rng.integers(len(found)))]
        return code[: line.start()] + code[line.end():]
    if kind == "not_installed":
        return code.replace("import numpy as np\n", "import numpy as np\nimport lightgbm as lgb\n", 1) \
            if "import numpy as np\n" in code else None
    if kind == "wrong_file":
        # the usual slip: a default name for a file named otherwise
        wrong = "test_data.csv" if names.test_file == "test.csv" else "test.csv"
        right = f'"{names.test_file}"'
        return code.replace(right, f'"{wrong}"', 1) if right in code else None
    if kind == "crash":
        if "y_train = " in code and rng.random() < 0.5:
            return re.sub(r"^(y_train = .*)$", r"\1\ny_train = y_train[:-1]", code, count=1, flags=re.MULTILINE)
        if "X_test = " in code:
            return re.sub(r"^(X_test = .*)$", r"\1\nX_test = X_test[:, 1:]", code, count=1, flags=re.MULTILINE)
        return None
    if kind == "invalid_submission":
        submit = _submission(code, names.id_column)
        if submit is None:
            return None
        frame, id_key = submit.group(1), f'{{"{names.id_column}":'
        broken = frame + ".iloc[1:]" if rng.random() < 0.5 else frame.replace(
            id_key, f'{{"{_misspelt(names.id_column)}":', 1)
        return code[: submit.start()] + broken + submit.group(2) + code[submit.end():]
    if kind == "foreign_target":
        submit = _submission(code, names.id_column)
        column = re.search(r'test_ids, "([^"]+)":', submit.group(1)) if submit else None
        if column is None:
            return None
        others = [name for name in _TARGET_NAMES if name != column.group(1)]
        start, end = submit.start() + column.start(1), submit.start() + column.end(1)
        return code[:start] + others[int(rng.integers(len(others)))] + code[end:]
    raise ValueError(f"unknown mutation {kind!r}; allowed: {', '.join(MUTATIONS + AGENT_MISTAKES)}")


def _held_out(name: str, fraction: float) -> bool:
    return int(hashlib.sha256(name.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF < fraction


def reference_variant(task: Any, ref: Any, heldout_fraction: float) -> SolutionVariant:
    """``ref`` unmodified; held out with every reference of a held-out task, else by a hash of its name."""
    heldout = task.split != "train" or _held_out(f"{task.task_id}/{ref.name}", heldout_fraction)
    return SolutionVariant(task.task_id, ref.name, REFERENCE, ref.code, heldout, ref.position_score)


def all_references(tasks: list[Any], heldout_fraction: float = 0.25) -> list[SolutionVariant]:
    """Every reference solution of ``tasks``, unmodified (their outcomes are the leaderboard's runs)."""
    return [reference_variant(task, ref, heldout_fraction) for task in tasks for ref in task.reference_solutions()]


def make_variants(tasks: list[Any], per_task: int, heldout_fraction: float = 0.25, seed: int = 0,
                  kinds: tuple[str, ...] = MUTATIONS) -> list[SolutionVariant]:
    """For each task, ``per_task`` references spread over the leaderboard, each unmodified and with
    every mutation of ``kinds`` that applies. Deterministic in (tasks, per_task, heldout_fraction, seed,
    kinds)."""
    out: list[SolutionVariant] = []
    for task in tasks:
        refs = task.reference_solutions()
        if not refs:
            continue
        picks = np.unique(np.linspace(0, len(refs) - 1, min(per_task, len(refs))).round().astype(int))
        for index in picks:
            out += reference_variants(task, int(index), heldout_fraction, seed, kinds)
    return out


def reference_variants(task: Any, index: int, heldout_fraction: float = 0.25, seed: int = 0,
                       kinds: tuple[str, ...] = MUTATIONS) -> list[SolutionVariant]:
    """The ``index``-th of ``task``'s references (weakest first) unmodified, then with every mutation of
    ``kinds`` that applies, drawn from a generator seeded by (seed, task, index)."""
    ref = task.reference_solutions()[index]
    unmodified = reference_variant(task, ref, heldout_fraction)
    code, heldout = unmodified.code, unmodified.heldout
    out = [unmodified]
    task_seed = int(hashlib.sha256(task.task_id.encode()).hexdigest()[:8], 16)
    rng = np.random.default_rng([seed, task_seed, index])
    names = solution_names(task)
    for kind in kinds:
        mutated = mutate(code, kind, rng, names)
        if mutated is not None and mutated != code:
            out.append(SolutionVariant(task.task_id, ref.name, kind, mutated, heldout, ref.position_score))
    return out


def _error_location(traceback_text: str) -> tuple[str | None, int | None]:
    lines = [ln for ln in traceback_text.strip().splitlines() if ln.strip()]
    error_type = None
    if lines:
        match = re.match(r"^([A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)|[A-Za-z_]\w*Error)\b", lines[-1])
        error_type = match.group(1).split(".")[-1] if match else None
    found = re.findall(r'File "solution\.py", line (\d+)', traceback_text)
    return error_type, int(found[-1]) if found else None


def _tail(text: str, chars: int) -> str:
    text = (text or "").strip()
    return text if len(text) <= chars else "[...]\n" + text[-chars:]


def outcome_of_execution(outcome: Any) -> Outcome:
    """An :class:`~wmrl.execution.ExecutionOutcome` reduced to what a verdict needs."""
    result, grade = outcome.result, outcome.grade
    if result.status == "ok":
        error_type, line, text = (None, None, "") if grade.valid else ("InvalidSubmission", None, grade.reason)
    else:
        tb = result.traceback or result.stderr_tail or ""
        error_type, line = _error_location(tb)
        if result.status in ("timeout", "memory", "disk_quota", "killed"):  # stopped at a limit
            limit_error = {"timeout": "TimeoutError", "disk_quota": "DiskQuotaExceeded"}
            error_type = error_type or limit_error.get(result.status, "MemoryError")
        text = _tail(tb, 600) or f"status {result.status}"
    return Outcome(result.status, bool(grade.valid), float(grade.position_score if grade.valid else 0.0),
                   error_type, line, text, _tail(result.stdout_tail, 300), float(outcome.total_seconds), "executed",
                   float(result.cpu_seconds))


def cache_dir() -> Path:
    return Path(os.environ.get("WMRL_CACHE") or Path.home() / ".cache" / "wmrl") / "outcomes"


def real_outcomes(variants: list[SolutionVariant], tasks: dict[str, Any], backend: Any, limits: Any, runtime: Any,
                  work_root: Path, workers: int = 2, progress: bool = False) -> dict[str, Outcome]:
    """Each variant's real outcome by ``variant.key``: references from their leaderboard run, the rest
    executed in ``backend`` (``workers`` at once) unless the cache already holds them. The cache is
    keyed by the backend, its revision, the time limit and ``runtime`` (the probed
    :class:`~wmrl.sandbox.probe.SandboxRuntime` of ``backend``: its interpreter and library versions)."""
    cache = cache_dir() / f"{backend.name}-r{backend.revision}-{limits.timeout_s:g}s-{runtime.digest()}"
    cache.mkdir(parents=True, exist_ok=True)
    results: dict[str, Outcome] = {}
    todo = []
    for v in variants:
        if v.kind == REFERENCE:
            results[v.key] = Outcome("ok", True, v.reference_score, None, None, "", "", 0.0, "leaderboard", 0.0)
        elif (cache / f"{v.key}.json").is_file():
            results[v.key] = Outcome(**json.loads((cache / f"{v.key}.json").read_text()))
        else:
            todo.append(v)

    def run(v: SolutionVariant) -> tuple[str, Outcome]:
        for attempt in range(STALL_ATTEMPTS):  # a machine too busy to run it is no outcome of the program
            try:
                executed = execute_and_grade(tasks[v.task_id], v.code, backend, limits, work_root)
                break
            except ExecutionStalled:
                if attempt == STALL_ATTEMPTS - 1:
                    raise
        outcome = outcome_of_execution(executed)
        atomic_write_json(cache / f"{v.key}.json", outcome.to_dict())
        return v.key, outcome

    bar = progress_display(len(todo), "executing variants", "variant", show=None if progress else False)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for key, outcome in pool.map(run, todo):
            results[key] = outcome
            bar.update(1)
    bar.close()
    return results
