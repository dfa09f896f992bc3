"""The task-family pool: instances drawn from seeds, their split, their build, their leaderboards.

Tests build a handful of instances (one of each family plus one held-out), never the full pool."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import cross_val_score

from wmrl.cli.main import main
from wmrl.config import load_config
from wmrl.config_checks import ConfigError
from wmrl.grading import grade_submission
from wmrl.models.corpus import pool_parts
from wmrl.tasks.builtin.build import describe, run_reference, write_public
from wmrl.tasks.builtin.refcode import make_code
from wmrl.tasks.config import FamiliesConfig, TasksConfig
from wmrl.tasks.families.pool import (
    GENERATORS,
    HELDOUT_OFFSET,
    build_families,
    default_root,
    instances,
    pool_complete,
    select,
)
from wmrl.tasks.families.surface import MIN_REFERENCES
from wmrl.tasks.families.tabular import _latent
from wmrl.tasks.pool import ensure_families_pool, load_pool, resolve_pool_root
from wmrl.world_model_data.variants import all_references, clean_reference

# The small pool builds six instances (about 20 s of CPU); a loaded machine needs more than the default limit.
pytestmark = pytest.mark.timeout(1800)

SMALL = FamiliesConfig(train=5, heldout=1)  # one training instance per family, one held-out tabular one
LABEL_WORDS = ("weak", "deliberately", "useless", "shuffled", "strong", "best", "worst", "baseline")


@pytest.fixture(scope="module")
def small_pool(tmp_path_factory):
    """The pool of SMALL, built on first use into its cache directory under $WMRL_CACHE."""
    cache = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WMRL_CACHE", str(cache))
        root = resolve_pool_root(TasksConfig(pool="families", families=SMALL))
        assert root == default_root(SMALL) and root.is_relative_to(cache)
    return root


@pytest.fixture(scope="module")
def small_tasks(small_pool):
    return load_pool(small_pool)


@pytest.fixture(scope="module")
def drawn():
    """Twenty instances drawn but not built (no reference runs): the surface they vary."""
    return [i.make() for i in instances(FamiliesConfig(train=20, heldout=5))]


def test_config_spreads_instances_over_every_family_in_both_splits():
    every = instances(FamiliesConfig(train=120, heldout=30))
    assert Counter(i.split for i in every) == {"train": 120, "heldout": 30}
    for split in ("train", "heldout"):
        assert {i.family for i in every if i.split == split} == set(GENERATORS)
    assert len({i.task_id for i in every}) == 150


def test_heldout_seeds_are_disjoint_from_each_familys_training_seeds():
    every = instances(FamiliesConfig(train=120, heldout=30, seed=3))
    for family in GENERATORS:
        train = {i.seed for i in every if i.family == family and i.split == "train"}
        heldout = {i.seed for i in every if i.family == family and i.split == "heldout"}
        assert train and heldout and not train & heldout
        assert min(heldout) >= 3 * 10**6 + HELDOUT_OFFSET > max(train)


def test_an_instance_is_a_function_of_its_seed():
    first, again = instances(SMALL)[3].make(), instances(SMALL)[3].make()
    for name in ("train", "test", "answers", "sample_submission"):
        pd.testing.assert_frame_equal(getattr(first, name), getattr(again, name))
    assert describe(first) == describe(again) and first.loader == again.loader
    other = instances(FamiliesConfig(train=5, heldout=1, seed=1))[3].make()
    assert not first.train.equals(other.train)


def test_instances_differ_in_what_a_solution_must_read(drawn):
    def distinct(values):
        return len(set(values))

    assert distinct(d.train_file for d in drawn) >= 3 and distinct(d.test_file for d in drawn) >= 3
    assert distinct(d.id_column for d in drawn) >= 4 and distinct(d.target for d in drawn) >= 6
    assert distinct(d.metric for d in drawn) >= 6 and distinct(d.output for d in drawn) == 4
    assert distinct(len(d.train) for d in drawn) >= 20
    assert distinct(str(d.train[d.target].dtype) for d in drawn if d.output == "label") == 2  # int and str labels
    sources = {d.source for d in drawn}
    assert len(sources) >= 8  # families x regimes: which modelling choice pays
    majority = [d.train[d.target].value_counts(normalize=True).iloc[0] for d in drawn if d.output != "value"]
    assert max(majority) - min(majority) > 0.2  # class balance


def test_every_instance_states_its_files_columns_and_metric(drawn):
    for data in drawn:
        text = describe(data)
        assert f"`{data.train_file}`" in text and f"`{data.test_file}`" in text
        assert f"`{data.id_column}`" in text and f"`{data.target}`" in text and data.metric in text
        assert data.sample_submission.columns[0] == data.id_column
        assert data.id_column in data.train.columns and data.target not in data.test.columns


@pytest.mark.parametrize("regime, winner", [("linear", "linear"), ("interaction", "forest")])
def test_the_generating_regime_decides_which_model_family_wins(regime, winner):
    rng = np.random.default_rng(7)
    z = rng.normal(size=(800, 4))
    y = (_latent(rng, z, regime) + 0.3 * rng.normal(size=800) > 0).astype(int)
    linear = cross_val_score(LogisticRegression(), z, y, cv=3).mean()
    forest = cross_val_score(RandomForestClassifier(n_estimators=30, random_state=0), z, y, cv=3).mean()
    assert (linear > forest + 0.03) if winner == "linear" else (forest > linear + 0.1)


def test_small_pool_has_every_family_and_marks_the_heldout_instance(small_tasks, small_pool):
    assert {t.split for t in small_tasks} == {"train", "heldout"}
    assert {t.category for t in small_tasks} == {"tabular", "text", "image"}
    (heldout,) = [t for t in small_tasks if t.split == "heldout"]
    assert json.loads((heldout.root / "task.json").read_text())["split"] == "heldout"
    assert pool_complete(small_pool, SMALL) and not pool_complete(small_pool, FamiliesConfig(train=6, heldout=1))


def test_leaderboards_are_the_references_real_scores_of_spread_strength(small_tasks):
    for task in small_tasks:
        refs = task.reference_solutions()
        assert len(refs) >= MIN_REFERENCES and len(task.leaderboard) == len(refs), task.task_id
        positions = [r.position_score for r in refs]
        assert max(positions) == 1.0 and min(positions) < 0.3, task.task_id


def test_a_reference_rerun_writes_a_valid_submission_that_ties_its_entry(small_tasks, tmp_path):
    for task in small_tasks:
        ref = task.reference_solutions()[len(task.reference_solutions()) // 2]
        submission = tmp_path / f"{task.task_id}.csv"
        run_reference(clean_reference(ref.code), "solution.py", task.public_dir, submission)
        grade = grade_submission(task, submission)
        assert grade.valid, (task.task_id, grade.reason)
        assert grade.position_score == pytest.approx(ref.position_score), task.task_id


@pytest.mark.parametrize("instance", instances(SMALL)[:5], ids=lambda i: i.family)
def test_discovered_references_read_every_name_from_the_data_and_predict_what_literal_ones_do(instance, tmp_path):
    """Schema "discovered": no file or column name in the code, the same submission byte for byte (the
    first training instance of each family; the tabular ones have integer-coded categorical columns)."""
    literal, discovered = instance.make(), replace(instance, schema="discovered").make()
    write_public(literal, tmp_path / "public")
    names = {literal.train_file, literal.test_file, literal.id_column, literal.target}
    # the cheap references, one per feature choice: every loader path the family has
    firsts = {v.features: i for i, v in reversed(list(enumerate(literal.variants)))
              if not v.model.startswith(("svc", "mlp", "rf_", "et_", "gb_", "bag_", "ada_", "hgb_"))}
    assert len(firsts) >= 2
    for i in sorted(firsts.values()):
        code = make_code(discovered, discovered.variants[i])
        assert not [n for n in names if f'"{n}"' in code], code
        run_reference(make_code(literal, literal.variants[i]), "literal.py", tmp_path / "public", tmp_path / "a.csv")
        run_reference(code, "discovered.py", tmp_path / "public", tmp_path / "b.csv")
        assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes(), literal.variants[i].name
    assert describe(literal) == describe(discovered)


def test_reference_code_carries_no_label_bearing_words(small_tasks):
    for task in small_tasks:
        for ref in task.reference_solutions():
            code = clean_reference(ref.code)
            assert code.startswith('import os'), ref.path
            assert not [w for w in LABEL_WORDS if w in code.lower()], ref.path


def test_heldout_instances_stay_out_of_sft_memory_and_corpus_data(small_tasks, small_pool):
    heldout = {t.task_id for t in small_tasks if t.split == "heldout"}
    variants = all_references(small_tasks, heldout_fraction=0.0)
    assert {v.task_id for v in variants if v.heldout} == heldout
    corpus = [name for name, _ in pool_parts(small_pool)]
    assert not [n for n in corpus if "/reference/" in n and n.split("/")[0] in heldout]
    assert [n for n in corpus if "/reference/" in n]


def test_ensuring_a_complete_pool_builds_nothing(small_pool):
    stamp = (small_pool / "pool.json").stat().st_mtime_ns
    assert ensure_families_pool(SMALL, small_pool) == small_pool
    assert (small_pool / "pool.json").stat().st_mtime_ns == stamp


def test_config_names_the_pool_and_refuses_unknown_values():
    cfg = load_config(None, ["tasks.pool=families", "tasks.families.train=7"])
    assert cfg.tasks.pool == "families" and cfg.tasks.families.train == 7
    with pytest.raises(ConfigError, match=r"tasks\.pool='nope'.*builtin, families"):
        load_config(None, ["tasks.pool=nope"])
    with pytest.raises(ConfigError, match=r"tasks\.families\.heldout=0"):
        load_config(None, ["tasks.families.heldout=0"])


def test_only_names_families_or_instances_and_refuses_others():
    assert {i.family for i in select(SMALL, ["text"])} == {"text"}
    assert [i.task_id for i in select(SMALL, ["tabular-binary-heldout-000"])] == ["tabular-binary-heldout-000"]
    with pytest.raises(ValueError, match="unknown task family or instance"):
        select(SMALL, ["nope"])


def test_cli_builds_one_instance_and_lists_it(tmp_path, capsys):
    root = tmp_path / "pool"
    args = [f"tasks.root={root}", "tasks.pool=families", "tasks.families.train=1", "tasks.families.heldout=1"]
    assert main(["tasks", "build", *args, "--only", "tabular-binary-heldout-000"]) == 0
    assert "1 task(s) (0 train, 1 held out)" in capsys.readouterr().out
    assert main(["tasks", "list", "--split", "heldout", *args]) == 0
    assert "tabular-binary-heldout-000" in capsys.readouterr().out


def test_a_build_in_worker_processes_writes_the_same_bytes_as_one_at_a_time(tmp_path):
    ids = ["tabular-binary-train-000", "text-train-000"]
    build_families(tmp_path / "serial", SMALL, only=ids, progress=False, workers=1)
    build_families(tmp_path / "parallel", SMALL, only=ids, progress=False, workers=2)
    files = sorted(p.relative_to(tmp_path / "serial") for p in (tmp_path / "serial").rglob("*") if p.is_file())
    assert {str(f).split("/")[0] for f in files} >= set(ids) and len(files) > 2 * MIN_REFERENCES
    for relative in files:
        assert (tmp_path / "parallel" / relative).read_bytes() == (tmp_path / "serial" / relative).read_bytes(), relative
    assert sorted(p.relative_to(tmp_path / "parallel") for p in (tmp_path / "parallel").rglob("*")
                  if p.is_file()) == files


UNGUARDED_SCRIPT = """
import sys
from pathlib import Path

from wmrl.tasks.config import FamiliesConfig
from wmrl.tasks.pool import ensure_families_pool

# no `if __name__ == "__main__":`: each spawned build worker runs this again
ensure_families_pool(FamiliesConfig(train=2, heldout=1), Path(sys.argv[1]), progress=False)
"""


def test_a_script_that_asks_for_the_pool_unguarded_fails_with_the_fix_instead_of_hanging(tmp_path):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one core: the build runs in-process, no spawned worker re-runs the script")
    script = tmp_path / "build_unguarded.py"
    script.write_text(UNGUARDED_SCRIPT)
    # Before the fix each worker waited for ever on the lock its parent held, and the parent for them.
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "pool")], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}, check=False)
    assert done.returncode != 0
    assert 'put the script\'s code under `if __name__ == "__main__":`' in done.stderr
