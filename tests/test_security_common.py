"""Shared fixtures of the security suite (``tests/test_security_*.py``); holds no tests itself.

``world`` builds, per test, everything a hostile solution might go after: a real task directory
(public data, private answers carrying a secret token), a fake run directory, another execution's
graded work dir, and a fresh work dir for the attacker. ``attack(world, code)`` runs the code in
the real bwrap sandbox, grades whatever it left, and returns both.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from wmrl.execution.outcome import execute_and_grade
from wmrl.grading.grader import Grade
from wmrl.sandbox import ExecutionResult, SandboxConfig, SandboxLimits, make_backend
from wmrl.tasks.layouts import load_task
from wmrl.tasks.task import Task

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")

SECRET_ENV = "WMRL_SECURITY_TEST_SECRET"


@dataclass
class World:
    root: Path
    task: Task
    secret: str
    work_root: Path  # the attacker's work dir is created below here by execute_and_grade
    other_work: Path  # another execution's work dir, already holding its graded submission
    run_dir: Path  # a fake run directory (rollouts, anchors, checkpoints)
    protected: list[Path]  # everything that must be byte-identical after an attack

    @property
    def answers(self) -> Path:
        return self.task.answers_path

    @property
    def work_dir(self) -> Path:
        """The attacker's work dir (after ``attack``)."""
        (only,) = [p for p in self.work_root.iterdir() if p.is_dir()]
        return only


def build_task(root: Path, secret: str) -> Task:
    """A tiny real task in the project's own layout: 60 train rows, 40 hidden test labels."""
    rng = np.random.default_rng(0)
    public, private = root / "public", root / "private"
    public.mkdir(parents=True)
    private.mkdir()
    x = rng.normal(size=(100, 2))
    y = (x[:, 0] + 0.3 * rng.normal(size=100) > 0).astype(int)
    ids = [f"r{i:03d}" for i in range(100)]
    train = pd.DataFrame({"id": ids[:60], "x1": x[:60, 0], "x2": x[:60, 1], "label": y[:60]})
    test = pd.DataFrame({"id": ids[60:], "x1": x[60:, 0], "x2": x[60:, 1]})
    train.to_csv(public / "train.csv", index=False)
    test.to_csv(public / "test.csv", index=False)
    pd.DataFrame({"id": ids[60:], "label": 0}).to_csv(public / "sample_submission.csv", index=False)
    (public / "description.md").write_text("# Tiny\n\nPredict `label`. Metric: accuracy.\n")
    answers = pd.DataFrame({"id": ids[60:], "label": y[60:], "secret": secret})
    answers.to_csv(private / "answers.csv", index=False)
    scores = np.linspace(0.45, 0.98, 50)
    pd.DataFrame({"rank": range(1, 51), "score": scores[::-1]}).to_csv(
        private / "leaderboard.csv", index=False
    )
    (root / "task.json").write_text('{"metric": "accuracy"}')
    return load_task(root)


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    secret = f"SECRET-{uuid.uuid4().hex}"
    monkeypatch.setenv(SECRET_ENV, secret)  # the host environment must not reach the sandbox
    task = build_task(tmp_path / "tasks" / "tiny", secret)
    run_dir = tmp_path / "runs" / "run-1"
    (run_dir / "anchors" / "results").mkdir(parents=True)
    (run_dir / "anchors" / "results" / "req-1.json").write_text('{"score": 0.5}')
    (run_dir / "rollouts.jsonl").write_text('{"step": 0}\n')
    other_work = tmp_path / "exec" / "other"
    other_work.mkdir(parents=True)
    (other_work / "submission.csv").write_text(task.sample_submission_path.read_text())
    work_root = tmp_path / "exec" / "attempts"
    return World(
        root=tmp_path,
        task=task,
        secret=secret,
        work_root=work_root,
        other_work=other_work,
        run_dir=run_dir,
        protected=[task.root, run_dir, other_work],
    )


def snapshot(paths: list[Path]) -> dict[str, tuple]:
    """Path -> (kind, mode, size, mtime_ns, sha256) for everything below ``paths`` (no link following)."""
    state: dict[str, tuple] = {}
    for top in paths:
        for dirpath, dirnames, filenames in os.walk(top):
            for name in [dirpath, *(os.path.join(dirpath, n) for n in dirnames + filenames)]:
                st = os.lstat(name)
                digest = ""
                if os.path.isfile(name) and not os.path.islink(name):
                    digest = hashlib.sha256(Path(name).read_bytes()).hexdigest()
                state[name] = (st.st_mode, st.st_size, st.st_mtime_ns, digest)
    return state


def limits(timeout_s: float = 5.0, **kw: int) -> SandboxLimits:
    return SandboxLimits(timeout_s=timeout_s, **{"memory_mb": 1024, "max_procs": 64, **kw})


def attack(
    world: World, code: str, lim: SandboxLimits | None = None
) -> tuple[ExecutionResult, Grade]:
    """Run hostile ``code`` in the bwrap sandbox, then grade what it left, as the service does."""
    backend = make_backend(SandboxConfig(backend="bwrap"))
    outcome = execute_and_grade(
        world.task, code, backend, lim or limits(), world.work_root, keep_work_dir=True
    )
    return outcome.result, outcome.grade


def seen_by_attacker(world: World, result: ExecutionResult) -> str:
    """Everything the attacker could have smuggled out: its output and its work dir's files."""
    parts = [result.stdout_tail, result.stderr_tail, result.traceback or ""]
    for path in world.work_dir.rglob("*"):
        if path.is_file() and not path.is_symlink():
            parts.append(path.read_text(errors="replace"))
    return "\n".join(parts)


def assert_contained(
    world: World, before: dict[str, tuple], result: ExecutionResult, grade: Grade
) -> None:
    """The three checks every attack ends with."""
    assert world.secret not in seen_by_attacker(world, result)
    assert snapshot(world.protected) == before
    assert isinstance(grade, Grade) and 0.0 <= grade.position_score <= 1.0
