"""scripts/build_fingerprint.py: the inputs of the tiny default's build hashes, digest by digest, so that two
machines' fingerprints name the inputs that made their hashes differ."""

from __future__ import annotations

import shutil

import pytest
from script_support import load_script

from wmrl.config import load_config
from wmrl.configs import TINY_CONFIG
from wmrl.models.corpus import prompt_texts, tokenizer_corpus
from wmrl.models.init import RECIPE, tiny_model_hash
from wmrl.tasks.builtin.build import build_pool
from wmrl.tasks.pool import load_pool

fingerprint = load_script("build_fingerprint")


@pytest.fixture(scope="module")
def small_pool(tmp_path_factory):
    root = tmp_path_factory.mktemp("fp") / "pool"
    build_pool(root, only=["diabetes"], progress=False)  # one training task: its references are in the corpus
    return root


def test_the_base_model_entry_is_the_hash_the_build_uses_and_names_every_corpus_text(small_pool):
    cfg = load_config(str(TINY_CONFIG))
    found = fingerprint.base_model(cfg, small_pool)
    corpus = tokenizer_corpus(small_pool, prompt_texts())
    assert found["name"] == f"{RECIPE}-{tiny_model_hash(cfg.model.tiny, corpus)[:16]}"
    assert len(found["corpus"]) == len(corpus)  # one named entry per text: no two texts share a name
    assert {"generic", "prompt/0", "diabetes-progression/overview", "diabetes-progression/sample_submission"} <= set(
        found["corpus"])
    (task,) = load_pool(small_pool)
    weakest_first = [ref.name for ref in task.reference_solutions()]
    assert found["reference_order"] == {task.task_id: " ".join(weakest_first)}
    assert len(weakest_first) > 10 and all(f"{task.task_id}/reference/{n}" in found["corpus"] for n in weakest_first)

def test_comparing_two_pools_names_exactly_the_inputs_that_differ(small_pool, tmp_path):
    cfg = load_config(str(TINY_CONFIG))
    other = tmp_path / "pool"
    shutil.copytree(small_pool, other)
    (task,) = load_pool(other)
    reference = task.reference_solutions()[3]
    reference.path.write_text(reference.code + "# one more line\n")
    board = task.leaderboard_path
    board.write_text(board.read_text().replace("0.", "0.0", 1))
    def fp(pool):
        return {"base_model": fingerprint.base_model(cfg, pool), "leaderboards": fingerprint.leaderboards(pool)}

    assert fingerprint.differences(fp(small_pool), fp(small_pool)) == []
    changed = [line.split(":")[0] for line in fingerprint.differences(fp(small_pool), fp(other))]
    assert changed == ["base_model.name", f"base_model.corpus.diabetes-progression/reference/{reference.name}",
                       "leaderboards.diabetes-progression"]


def test_differences_report_entries_present_on_one_side_only():
    first = {"sft": {"outcomes": {"a": "1", "b": "2"}}, "versions": {"torch": "2.13.0+cpu"}}
    second = {"sft": {"outcomes": {"a": "1", "c": "3"}}, "versions": {"torch": "2.13.0"}}
    assert fingerprint.differences(first, second) == [
        "versions.torch: '2.13.0+cpu' != '2.13.0'",
        "sft.outcomes.b: only in the first",
        "sft.outcomes.c: only in the second",
    ]

def test_the_machine_entry_names_the_blas_kernels_in_use():
    facts = fingerprint.machine()
    assert facts["openblas"], "numpy's and scipy's OpenBLAS are loaded and report the kernel they chose"
    assert all(isinstance(core, str) and core for core in facts["openblas"].values())
    assert isinstance(facts["cpu_flags"]["avx2"], bool)
