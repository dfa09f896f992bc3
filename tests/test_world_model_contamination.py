"""What the world model's evaluation must not have seen (issue 36): programs compared by normalised code,
near-copies removed from the memory, and no reference shown with the pool's header."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from test_sft_data import REFERENCE, task_with_references
from test_world_model_memory import program

from wmrl.rollout import content_key
from wmrl.sft.data import spread_references
from wmrl.world_model.memory import Executed
from wmrl.world_model_data.contamination import NearCopies, normalised_code, split_near_copies
from wmrl.world_model_data.variants import clean_reference, reference_variant

REPO = Path(__file__).resolve().parents[1]
WEAK = REFERENCE.replace("`tiny-parity`.", "`tiny-parity` (deliberately weak).")  # as the pool labels one


def eval_script():
    spec = importlib.util.spec_from_file_location("eval_world_model", REPO / "benchmarks" / "eval_world_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_normalised_code_drops_the_pools_header_comments_and_blank_space():
    commented = clean_reference(REFERENCE).replace(
        "model.fit(X_train, y_train)", "model.fit(X_train,   y_train)  # fit it\n\n    # a note\n")
    assert "Reference solution" not in normalised_code(WEAK) and "weak" not in normalised_code(WEAK)
    assert normalised_code(WEAK) == normalised_code(REFERENCE) == normalised_code(commented)
    assert normalised_code('x = "#1"  # why\n') == 'x = "#1"'  # a "#" in a string is code
    assert normalised_code("x = (1,\n# cut") == "x = (1,"  # a cut reply does not tokenize: still normalised


def test_a_copy_without_the_header_and_a_sibling_leave_the_memory_and_what_stays_has_no_header():
    evaluated = NearCopies([("t", WEAK)])  # an evaluated reference of task t, as the pool stores it
    # the policy's sample of it: the same program without the header, which the old guard (content keys of
    # the code as stored) let through
    copy = Executed("t", clean_reference(WEAK), 0.2, True)
    assert copy.key != content_key("t", WEAK)
    sibling = Executed("t", clean_reference(REFERENCE).replace("max_depth=3", "max_depth=5"), 0.4, True)
    broken = Executed("t", clean_reference(REFERENCE).replace('"test.csv"', '"test_data.csv"'), 0.0, False)
    other = Executed("t", program("GradientBoostingRegressor", 1), 0.9, True)  # another program altogether
    elsewhere = Executed("u", sibling.code, 0.7, True)  # the same code for another task: its own outcome
    kept, removed = split_near_copies([copy, sibling, broken, other, elsewhere], evaluated)
    assert removed == [copy, sibling, broken] and kept == [other, elsewhere]
    assert evaluated.copies("t", copy.code) and not evaluated.copies("t", sibling.code)
    assert not NearCopies([("t", WEAK)], threshold=1.0).holds("t", sibling.code)  # the threshold decides
    assert NearCopies([("t", WEAK)], by_task=False).holds("u", sibling.code)  # across tasks, when asked
    with pytest.raises(ValueError, match="threshold"):
        NearCopies([], threshold=0.0)


def test_the_training_tasks_evaluated_references_are_none_the_policys_sft_reproduces(tmp_path):
    task = task_with_references(tmp_path, 12)
    refs = task.reference_solutions()
    chosen = eval_script().train_task_reference_variants([task], 2, 4, 0.5, 0)
    names = {v.reference for v in chosen}
    assert len(names) == 2 and {v.kind for v in chosen} >= {"reference", "wrong_file"}
    assert not names & {ref.name for ref in spread_references(refs, 4)}  # the policy's SFT references
    assert all(reference_variant(task, ref, 0.5).heldout for ref in refs if ref.name in names)  # not the WM's
