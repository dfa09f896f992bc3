"""The built-in pool: composition, deterministic build, first-use build under a lock."""

import dataclasses
import hashlib
import json
import subprocess
import sys

import pandas as pd
import pytest

from wmrl.grading.metrics import get_metric
from wmrl.tasks.builtin.build import (
    MARKER,
    MIN_REFERENCES,
    TASK_IDS,
    ForeignDirectory,
    build_pool,
    check_variants,
    family_registry,
    resolve_families,
)
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
        assert len(data.variants) >= 50, data.task_id


def test_every_family_mixes_many_model_families_and_settings(families):
    for data in families:
        models = {v.model.removesuffix("_raw").removesuffix("_sparse") for v in data.variants}
        assert len(models) >= 12, (data.task_id, sorted(models))
        assert any(v.shuffle_labels for v in data.variants), data.task_id
        assert len({v.fraction for v in data.variants}) >= 4, data.task_id
        assert len({v.features for v in data.variants}) >= 3, data.task_id


def test_too_few_or_duplicate_references_are_refused(families):
    data = families[0]
    with pytest.raises(ValueError, match=f"needs at least {MIN_REFERENCES}"):
        check_variants(dataclasses.replace(data, variants=data.variants[: MIN_REFERENCES - 1]))
    with pytest.raises(ValueError, match="duplicate reference names"):
        check_variants(dataclasses.replace(data, variants=[*data.variants, data.variants[0]]))


def test_task_ids_are_unique(families):
    ids = [d.task_id for d in families]
    assert len(ids) == len(set(ids))


def test_build_is_byte_for_byte_deterministic(tmp_path):
    build_pool(tmp_path / "a", only=CHEAP, progress=False)
    build_pool(tmp_path / "b", only=CHEAP, progress=False)
    first, second = digest_tree(tmp_path / "a"), digest_tree(tmp_path / "b")
    assert first == second and len(first) > 200  # images included


def test_leaderboard_is_made_of_the_references_real_scores_only(wine_task):
    task = wine_task
    refs = task.reference_solutions()
    board = pd.read_csv(task.leaderboard_path)
    assert len(board) == len(refs) >= 50
    assert sorted(board["source"]) == sorted(f"reference:{r.name}" for r in refs)
    by_name = {f"reference:{r.name}": r.raw_score for r in refs}
    assert all(by_name[src] == score for src, score in zip(board["source"], board["score"]))


def test_reference_position_scores_spread_and_weak_ones_trail(wine_task):
    refs = wine_task.reference_solutions()
    scores = [r.position_score for r in refs]
    assert min(scores) < 0.1 and max(scores) > 0.9
    assert max(r.position_score for r in refs if r.weak) < max(scores)
    assert scores == sorted(scores)  # weakest first


def test_shuffled_label_fit_scores_worse_than_the_same_model_on_true_labels(wine_task):
    refs = {r.name: r for r in wine_task.reference_solutions()}
    shuffled, true = refs["shuffled-labels-logreg"], refs["logreg-C1"]
    assert "permutation(y_train)" in shuffled.code and "permutation(y_train)" not in true.code
    assert shuffled.position_score < true.position_score


def test_reference_files_follow_the_contract(wine_task):
    code = wine_task.reference_solutions()[0].code
    assert 'os.environ["DATA_DIR"]' in code and 'os.environ["SUBMISSION_PATH"]' in code


def test_only_adds_a_task_and_keeps_the_other_tasks(tmp_path):
    build_pool(tmp_path / "pool", only=["wine"], progress=False)
    build_pool(tmp_path / "pool", only=["lfw_faces"], progress=False)
    assert [t.task_id for t in load_pool(tmp_path / "pool")] == ["lfw-face-detection", "wine-cultivar"]
    index = json.loads((tmp_path / "pool" / "pool.json").read_text())
    assert [t["task_id"] for t in index["tasks"]] == ["lfw-face-detection", "wine-cultivar"]


def test_pool_is_shareable_under_the_umask_and_answers_stay_private(tmp_path):
    import os

    old = os.umask(0o022)
    try:
        build_pool(tmp_path / "pool", only=["wine"], progress=False)
    finally:
        os.umask(old)
    task = tmp_path / "pool" / "wine-cultivar"
    modes = {p: (tmp_path / "pool" / p).stat().st_mode & 0o777 for p in (".", "pool.json")}
    assert modes == {".": 0o755, "pool.json": 0o644}  # was 0700 / 0600: a lab could not share it
    assert (task / "public" / "train.csv").stat().st_mode & 0o777 == 0o644
    assert (task / "private").stat().st_mode & 0o777 == 0o700


def test_rebuild_keeps_files_and_task_copies_wmrl_did_not_create(tmp_path):
    root = tmp_path / "pool"
    build_pool(root, only=["wine"], progress=False)
    (root / "NOTES.md").write_text("my notes")
    dojo = root / "my-dojo-comp" / "data" / "public"
    dojo.mkdir(parents=True)
    (dojo / "train.csv").write_text("id,y\n1,2\n")
    (root / "wine-cultivar" / "public" / "train.csv").write_text("tampered")
    build_pool(root, only=["wine-cultivar"], progress=False)
    assert (root / "NOTES.md").read_text() == "my notes"
    assert (dojo / "train.csv").read_text() == "id,y\n1,2\n"
    assert (root / "wine-cultivar" / "public" / "train.csv").read_text() != "tampered"  # rebuilt
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


def test_non_empty_directory_that_is_no_wmrl_pool_is_refused_untouched(tmp_path):
    root = tmp_path / "shared"
    root.mkdir()
    (root / "thesis.tex").write_text("chapter 1")
    with pytest.raises(ForeignDirectory, match="thesis.tex.*never replaces"):
        build_pool(root, only=["wine"], progress=False)
    assert sorted(p.name for p in root.iterdir()) == ["thesis.tex"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shared"]


def test_task_directory_of_the_same_name_not_built_by_wmrl_is_refused(tmp_path):
    root = tmp_path / "pool"
    build_pool(root, only=["wine"], progress=False)
    (root / "wine-cultivar" / MARKER).unlink()
    meta = json.loads((root / "wine-cultivar" / "task.json").read_text())
    (root / "wine-cultivar" / "task.json").write_text(json.dumps({**meta, "version": "mine"}))
    with pytest.raises(ForeignDirectory, match="wine-cultivar.*not built by wmrl"):
        build_pool(root, only=["wine"], progress=False)
    assert json.loads((root / "wine-cultivar" / "task.json").read_text())["version"] == "mine"


def test_only_accepts_family_names_and_task_ids(families):
    assert TASK_IDS == {name: make().task_id for name, make in family_registry().items()}
    assert resolve_families(["wine-cultivar", "wine", "lfw_faces"]) == ["wine", "lfw_faces"]


def test_unknown_task_is_an_error_listing_families_and_ids(tmp_path):
    with pytest.raises(ValueError, match="unknown built-in task.*wine \\(wine-cultivar\\)"):
        build_pool(tmp_path / "pool", only=["nope"])
    assert not (tmp_path / "pool").exists()


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
        board = pd.read_csv(task.leaderboard_path)
        assert len(task.leaderboard) == len(refs) >= 50, task.task_id
        assert board["source"].str.startswith("reference:").all(), task.task_id
        assert min(r.position_score for r in refs) < 0.1 and max(r.position_score for r in refs) > 0.9, task.task_id
