"""The transfer testbed (issue 35): configs/tiny-transfer.yaml on the task-family pool, the world model's
mistakes on the families' own file and column names, and held-out instances kept out of every data set
the policy and the world model learn from."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from agent_support import tokenizer

from wmrl.config import load_config
from wmrl.grading import grade_submission
from wmrl.sft.data import AGENT, WORLD_MODEL, build_sft_data, run_context
from wmrl.tasks.builtin.build import run_reference
from wmrl.tasks.config import FamiliesConfig
from wmrl.tasks.families.pool import build_families
from wmrl.tasks.overview import task_overview
from wmrl.tasks.pool import load_pool
from wmrl.world_model_data.examples import memory_examples
from wmrl.world_model_data.variants import (
    MUTATIONS,
    SolutionNames,
    clean_reference,
    make_variants,
    mutate,
    solution_names,
)

REPO = Path(__file__).resolve().parents[1]
TRANSFER = REPO / "configs" / "tiny-transfer.yaml"
SMALL = FamiliesConfig(train=5, heldout=1)  # one training instance per family, one held-out tabular one
# An instance whose test file and id column are not the built-in tasks' test.csv and id.
RENAMED = "regression-train-000"

pytestmark = pytest.mark.timeout(1800)  # the pool's references run at build time; a loaded machine is slow
bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed (CI installs it)")


@pytest.fixture(scope="module")
def renamed_task(tmp_path_factory):
    root = tmp_path_factory.mktemp("pool")
    build_families(root, SMALL, only=[RENAMED], progress=False)
    (task,) = load_pool(root)
    return task


def test_mistakes_misname_the_tasks_own_test_file_and_id_column(renamed_task, tmp_path):
    task = renamed_task
    names = solution_names(task)
    assert names == SolutionNames("test_features.csv", "record_id")  # read from the task's public files
    variants = {v.kind: v for v in make_variants([task], per_task=1, heldout_fraction=0.0)}
    assert set(MUTATIONS) <= set(variants)  # before: no wrong_file and no invalid_submission here
    assert '"test.csv"' in variants["wrong_file"].code and '"test_features.csv"' not in variants["wrong_file"].code
    reference = clean_reference(task.reference_solutions()[0].code)
    # the renamed id column, or the first row dropped (drawn): either way an invalid submission
    rng = np.random.default_rng(0)
    broken = {mutate(reference, "invalid_submission", rng, names) for _ in range(8)}
    assert any('{"RECORD_ID": test_ids' in code for code in broken) and any(".iloc[1:]" in code for code in broken)
    for code in broken:
        submission = tmp_path / "submission.csv"
        submission.unlink(missing_ok=True)
        run_reference(code, "solution.py", task.public_dir, submission)
        assert not grade_submission(task, submission).valid
    with pytest.raises(FileNotFoundError, match="test.csv"):
        run_reference(variants["wrong_file"].code, "solution.py", task.public_dir, tmp_path / "never.csv")


def test_the_built_in_names_keep_the_built_in_mistakes():
    """The built-in pool's variants (the committed SFT's examples) are unchanged."""
    code = ('test = pd.read_csv(os.path.join(DATA_DIR, "test.csv"))\n'
            'pd.DataFrame({"id": test_ids, "target": pred}).to_csv(SUBMISSION_PATH, index=False)\n')
    assert mutate(code, "wrong_file", np.random.default_rng(0)) == code.replace('"test.csv"', '"test_data.csv"')
    renamed = {mutate(code, "invalid_submission", np.random.default_rng(s)) for s in range(8)}
    assert code.replace('{"id":', '{"ID":') in renamed


@pytest.fixture(scope="module")
def small_pool_config(tmp_path_factory):
    """configs/tiny-transfer.yaml on the small family pool (built once into its own cache)."""
    cache = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WMRL_CACHE", str(cache))
        cfg = load_config(str(TRANSFER), [f"tasks.families.train={SMALL.train}",
                                          f"tasks.families.heldout={SMALL.heldout}",
                                          "world_model.sft_variants_per_task=1"])
        from wmrl.tasks.pool import resolve_pool_root

        root = resolve_pool_root(cfg.tasks)
    return cfg, cache, root


def test_the_transfer_config_trains_on_the_family_pool():
    cfg = load_config(str(TRANSFER), [])
    assert cfg.tasks.pool == "families" and cfg.trainer == "llm"
    assert (cfg.tasks.families.train, cfg.tasks.families.heldout) == (120, 30)
    assert cfg.tasks.split == "train"  # a run samples training instances only; held-out ones are evaluated


@bwrap
def test_heldout_instances_reach_no_sft_memory_or_world_model_example(small_pool_config, monkeypatch):
    cfg, cache, root = small_pool_config
    monkeypatch.setenv("WMRL_CACHE", str(cache))
    tasks = load_pool(root)
    heldout = [t for t in tasks if t.split == "heldout"]
    assert len(heldout) == 1 and len(tasks) == 6
    tok = tokenizer()
    data = build_sft_data(cfg, tok, max_tokens=100_000, progress=False)
    assert data.counts[AGENT] and data.counts[WORLD_MODEL]
    prompts = [tok.decode(ex.prompt_ids) for ex in data.examples]
    for task in heldout:
        overview = task_overview(task)
        assert not [p for p in prompts if overview in p]
        codes = {clean_reference(r.code) for r in task.reference_solutions()}
        assert not [ex for ex in data.examples if any(c in tok.decode(ex.target_ids) for c in codes)]
    # every training instance has its examples: the check above is not vacuous
    for task in tasks:
        if task.split == "train":
            assert [p for p in prompts if task_overview(task) in p]
    memory = memory_examples(cfg, tasks, run_context(cfg)[2], progress=False)  # the SFT's runtime: cached outcomes
    assert memory and not [e for e in memory if e.task_id in {t.task_id for t in heldout}]
