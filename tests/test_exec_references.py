"""Every built-in task's reference solutions really run in the bwrap sandbox and rank in order."""

import pytest

from wmrl.execution.outcome import execute_and_grade
from wmrl.sandbox import SandboxConfig, limits_from_config, make_backend
from wmrl.tasks.pool import ensure_builtin_pool, load_pool

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tasks():
    # Reuses $WMRL_TASKS_DIR or ~/.cache/wmrl/tasks/builtin-v2; builds it there on first use.
    return load_pool(ensure_builtin_pool())


def test_weak_and_strong_references_rank_in_order_in_the_sandbox(tasks, tmp_path):
    cfg = SandboxConfig(backend="bwrap")
    backend, limits = make_backend(cfg), limits_from_config(cfg, timeout_s=300)
    failures = []
    for task in tasks:
        refs = task.reference_solutions()
        weak = max((r for r in refs if r.weak), key=lambda r: r.position_score)
        strong = refs[-1]
        got = {}
        for ref in (weak, strong):
            outcome = execute_and_grade(task, ref.code, backend, limits, tmp_path)
            assert outcome.result.status == "ok", (task.task_id, ref.name, outcome.feedback)
            got[ref.name] = outcome.grade
            # The sandbox reproduces the score recorded at build time.
            assert outcome.grade.raw_score == pytest.approx(ref.raw_score, rel=1e-4, abs=1e-6), (task.task_id, ref.name)
        w, s = got[weak.name].position_score, got[strong.name].position_score
        if not (0 < w < 1 and s > w):
            failures.append((task.task_id, weak.name, w, strong.name, s))
    assert not failures
