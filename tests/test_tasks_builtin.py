"""The built-in pool: composition, deterministic build, first-use build under a lock."""

import hashlib
import subprocess
import sys

import pytest

from wmrl.grading.metrics import get_metric
from wmrl.tasks.builtin.build import build_pool, family_registry, synthetic_entries
from wmrl.tasks.pool import ensure_builtin_pool, load_pool

CHEAP = ["wine", "lfw_faces"]  # small families, enough to exercise tabular and image writers


@pytest.fixture(scope="module")
def wine_task(tmp_path_factory):
    root = tmp_path_factory.mktemp("wine") / "pool"
    build_pool(root, only=["wine"], progress=False)
    (task,) = load_pool(root)
    return task


@pytest.fixture(scope="module")
def families():
    return [make() for make in family_registry().values()]


def digest_tree(root):
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_pool_has_at_least_twelve_tasks_across_modalities(families):
    assert len(families) >= 12
    assert {d.category for d in families} == {"tabular", "image", "text"}


def test_pool_is_split_into_train_and_heldout_in_every_modality(families):
    assert {d.split for d in families} == {"train", "heldout"}
    assert {d.category for d in families if d.split == "heldout"} == {"tabular", "image", "text"}


def test_pool_uses_many_metrics_of_both_directions(families):
    metrics = {d.metric for d in families}
    assert len(metrics) >= 6
    assert {get_metric(m).direction for m in metrics} == {"max", "min"}


def test_every_family_has_deliberately_weak_and_enough_references(families):
    for data in families:
        assert sum(v.weak for v in data.variants) >= 3, data.task_id
        assert len(data.variants) >= 20, data.task_id


def test_task_ids_are_unique(families):
    ids = [d.task_id for d in families]
    assert len(ids) == len(set(ids))


def test_synthetic_entries_stay_inside_metric_bounds():
    entries = synthetic_entries([0.5, 0.9, 1.0], "accuracy", "t", 60)
    assert len(entries) == 57 and min(entries) >= 0.0 and max(entries) <= 1.0


def test_build_is_byte_for_byte_deterministic(tmp_path):
    build_pool(tmp_path / "a", only=CHEAP, progress=False)
    build_pool(tmp_path / "b", only=CHEAP, progress=False)
    first, second = digest_tree(tmp_path / "a"), digest_tree(tmp_path / "b")
    assert first == second and len(first) > 200  # images included


def test_built_task_has_fifty_entry_leaderboard_and_spread_references(wine_task):
    task = wine_task
    refs = task.reference_solutions()
    assert len(task.leaderboard) >= 50
    scores = [r.position_score for r in refs]
    assert min(scores) < 0.3 and max(scores) > 0.7
    assert max(r.position_score for r in refs if r.weak) < max(scores)


def test_reference_files_follow_the_contract(wine_task):
    code = wine_task.reference_solutions()[0].code
    assert 'os.environ["DATA_DIR"]' in code and 'os.environ["SUBMISSION_PATH"]' in code


def test_rebuild_replaces_the_pool_as_a_whole(tmp_path):
    build_pool(tmp_path / "pool", only=["wine"], progress=False)
    build_pool(tmp_path / "pool", only=["lfw_faces"], progress=False)
    assert [t.task_id for t in load_pool(tmp_path / "pool")] == ["lfw-face-detection"]


def test_unknown_family_is_an_error_listing_allowed(tmp_path):
    with pytest.raises(ValueError, match="unknown built-in task family.*wine"):
        build_pool(tmp_path / "pool", only=["nope"])


def test_first_use_builds_once_when_two_processes_race(tmp_path):
    root = tmp_path / "pool"
    code = ("import sys; from wmrl.tasks.pool import ensure_builtin_pool; "
            f"ensure_builtin_pool({str(root)!r}, only=['wine'])")
    procs = [subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True) for _ in range(2)]
    errs = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    assert sum("building tasks" in e for e in errs) == 1
    assert ensure_builtin_pool(root) == root  # complete: returns without building


@pytest.mark.slow
def test_full_builtin_pool_loads_with_spread_leaderboards():
    tasks = load_pool(ensure_builtin_pool())
    assert len(tasks) >= 12
    for task in tasks:
        refs = task.reference_solutions()
        assert len(task.leaderboard) >= 50, task.task_id
        assert min(r.position_score for r in refs) < 0.35 and max(r.position_score for r in refs) > 0.65, task.task_id
