"""SFT examples: the policy's replies on the run-time prompt, the world model's JSON from REAL outcomes."""

from __future__ import annotations

import itertools
import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from agent_support import ScriptedGenerator, tokenizer

from wmrl.agent.config import AgentConfig
from wmrl.agent.parse import parse_reply
from wmrl.agent.policy import AgentPolicy
from wmrl.agent.prompts import PromptContext
from wmrl.generation.base import SamplingParams
from wmrl.sandbox import ExecutionStalled, SandboxConfig, SandboxLimits, make_backend
from wmrl.sandbox.probe import table_runtime
from wmrl.sft.data import (
    SFTData,
    analysis_for,
    clean_reference,
    policy_examples,
    spread_references,
    world_model_examples,
)
from wmrl.tasks.layouts import load_task
from wmrl.tasks.testing import make_wmrl_task
from wmrl.world_model.prompts import CHECK_NAMES, WorldModelContext
from wmrl.world_model.verdict import parse_verdict
from wmrl.world_model_data.targets import failing_check
from wmrl.world_model_data.variants import (
    AGENT_MISTAKES,
    MUTATIONS,
    POLICY_SAMPLE,
    STALL_ATTEMPTS,
    make_variants,
    real_outcomes,
)

bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed (CI installs it)")

REFERENCE = '''"""Reference solution `tree` for task `tiny-parity`."""
import os

import numpy as np
import pandas as pd

DATA_DIR = os.environ["DATA_DIR"]
SUBMISSION_PATH = os.environ["SUBMISSION_PATH"]

from sklearn.tree import DecisionTreeClassifier

train = pd.read_csv(os.path.join(DATA_DIR, "train.csv"))
test = pd.read_csv(os.path.join(DATA_DIR, "test.csv"))
FEATURES = ['x']
X_train = train[FEATURES].to_numpy(dtype=float)
y_train = train["y"].to_numpy()
X_test = test[FEATURES].to_numpy(dtype=float)
test_ids = test["id"]

model = DecisionTreeClassifier(max_depth=3, random_state=0)
model.fit(X_train, y_train)

pred = model.predict(X_test)
pd.DataFrame({"id": test_ids, "y": pred}).to_csv(SUBMISSION_PATH, index=False)
'''


@pytest.fixture
def task(tmp_path: Path):
    root = make_wmrl_task(tmp_path / "pool")
    ref = root / "reference"
    ref.mkdir()
    (ref / "tree.py").write_text(REFERENCE)
    (ref / "index.json").write_text(json.dumps({"solutions": [
        {"name": "tree", "file": "tree.py", "raw_score": 0.5, "position_score": 0.6, "note": "model=tree features=all fraction=1.0"}]}))
    return load_task(root)


def task_with_references(tmp_path: Path, n: int):
    """A task with ``n`` references (``max_depth`` 1..n), reference i at position score i / n."""
    root = make_wmrl_task(tmp_path / "pool")
    (root / "reference").mkdir()
    solutions = []
    for i in range(n):
        (root / "reference" / f"r{i}.py").write_text(REFERENCE.replace("max_depth=3", f"max_depth={i + 1}"))
        solutions.append({"name": f"r{i}", "file": f"r{i}.py", "raw_score": i / 10, "position_score": i / n})
    (root / "reference" / "index.json").write_text(json.dumps({"solutions": solutions}))
    return load_task(root)


def agent_ctx():
    return PromptContext(max_turns=2, timeout_s=60, gpus=0, runtime=table_runtime())


def test_policy_example_is_the_run_time_prompt_then_analysis_and_one_code_block(task):
    data = SFTData([])
    overviews = {task.task_id: "Competition: Tiny\nBegin.\n"}
    policy_examples(tokenizer(), [task], overviews, agent_ctx(), "short", 10000, data)
    (example,) = data.examples
    policy = AgentPolicy(ScriptedGenerator(lambda p, k: ""), SamplingParams(), overviews,
                         AgentConfig(prompt_style="short", max_turns=2), agent_ctx())
    expected = policy.first_prompt(task.task_id)  # what the agent is shown at run time
    assert list(example.prompt_ids) == expected and example.kind == "agent"
    assert example.target_ids[-1] == tokenizer().eos_token_id
    reply = parse_reply(tokenizer().decode(list(example.target_ids), skip_special_tokens=True))
    assert reply.ok and reply.code == clean_reference(REFERENCE) and "Reference solution" not in reply.code
    assert 2 <= reply.analysis.count(". ") + 1 <= 4


def test_spread_references_keeps_the_weakest_and_strongest_at_even_ranks():
    refs = list(range(10))  # sorted weakest first, as Task.reference_solutions returns them
    assert spread_references(refs, 4) == [0, 3, 6, 9]
    assert spread_references(refs, 0) == refs and spread_references(refs, 20) == refs
    assert spread_references(refs, 1) == [9]


def test_analysis_names_target_metric_and_model(task):
    text = analysis_for(task, REFERENCE, "model=tree features=half fraction=0.2")
    assert "`y`" in text and "accuracy" in text and "DecisionTreeClassifier(max_depth=3" in text
    assert "half of the features" in text and "20% of the training rows" in text


def test_analysis_names_the_files_and_id_column_only_when_asked(task):
    plain = analysis_for(task, REFERENCE, "model=tree features=half fraction=0.2")
    named = analysis_for(task, REFERENCE, "model=tree features=half fraction=0.2", name_inputs=True)
    assert "reads DATA_DIR, predicts one row per test id" in plain and "train.csv" not in plain
    assert named.startswith(f"The script reads `train.csv` and `test.csv` from DATA_DIR and predicts one row per "
                            f"`{task.id_column}`. ")  # the inputs first, in the order the code uses them
    assert named.split(". ")[1:3] == plain.split(". ")[:2]  # then the target, metric and model as before
    assert 2 <= named.count(". ") + 1 <= 4
    data = SFTData([])
    policy_examples(tokenizer(), [task], {task.task_id: "Competition: Tiny\nBegin.\n"}, agent_ctx(), "short",
                    10000, data, name_inputs=True)
    assert "reads `train.csv` and `test.csv`" in tokenizer().decode(list(data.examples[0].target_ids))


def test_every_mutation_applies_to_a_builtin_style_reference(task):
    variants = make_variants([task], per_task=1, heldout_fraction=0.0)
    assert sorted(v.kind for v in variants) == sorted(["reference", *MUTATIONS])  # the SFT recipe: no agent mistake
    mistakes = make_variants([task], per_task=1, heldout_fraction=0.0, kinds=AGENT_MISTAKES)
    assert sorted(v.kind for v in mistakes) == sorted(["reference", *AGENT_MISTAKES])
    assert not any(v.heldout for v in variants)
    assert all(v.heldout for v in make_variants([task], per_task=1, heldout_fraction=1.0))


@bwrap
def test_world_model_targets_come_from_real_executions_and_are_cached(task, tmp_path, monkeypatch):
    monkeypatch.setenv("WMRL_CACHE", str(tmp_path / "cache"))
    variants = make_variants([task], per_task=1, heldout_fraction=0.0)
    backend, limits = make_backend(SandboxConfig(backend="bwrap")), SandboxLimits(timeout_s=60)
    runtime = table_runtime()
    outcomes = real_outcomes(variants, {task.task_id: task}, backend, limits, runtime, tmp_path / "work")
    by_kind = {v.kind: outcomes[v.key] for v in variants}
    assert by_kind["reference"].source == "leaderboard" and by_kind["reference"].score == 0.6
    expected = {"wrong_column": "KeyError", "missing_import": "NameError", "wrong_file": "FileNotFoundError",
                "crash": "ValueError", "invalid_submission": "InvalidSubmission", "not_installed": "ModuleNotFoundError"}
    for kind, error in expected.items():
        assert by_kind[kind].source == "executed" and not by_kind[kind].valid and by_kind[kind].error_type == error, kind
    assert by_kind["wrong_file"].error_line == 13  # the line reading test.csv
    cached = sorted((tmp_path / "cache" / "outcomes").rglob("*.json"))
    assert len(cached) == len(expected)

    def no_run(*args, **kwargs):
        raise AssertionError("a cached variant was executed again")

    monkeypatch.setattr("wmrl.world_model_data.variants.execute_and_grade", no_run)
    again = real_outcomes(variants, {task.task_id: task}, backend, limits, runtime, tmp_path / "work")
    assert {k: o.to_dict() for k, o in again.items()} == {k: o.to_dict() for k, o in outcomes.items()}
    # Another library version in the sandbox (an upgraded pandas moves traceback lines): not reused.
    pandas = next(i for i, lib in enumerate(runtime.libraries) if lib.name == "pandas")
    libraries = list(runtime.libraries)
    libraries[pandas] = replace(libraries[pandas], version="9.9.9")
    with pytest.raises(AssertionError, match="executed again"):
        real_outcomes(variants, {task.task_id: task}, backend, limits, replace(runtime, libraries=tuple(libraries)),
                      tmp_path / "work")

    data = SFTData([])
    sim = WorldModelContext(60, 0, table_runtime())
    world_model_examples(tokenizer(), variants, outcomes, {task.task_id: "Competition: Tiny\n"}, sim, CHECK_NAMES,
                         "short", 2000, 100000, data)
    assert data.counts["world_model"] == len(variants) * len(CHECK_NAMES)
    n_lines = 30
    for i, variant in enumerate(variants):
        answers = data.examples[i * 8:(i + 1) * 8]
        verdicts = [parse_verdict(tokenizer().decode(list(a.target_ids), skip_special_tokens=True), c, n_lines)
                    for a, c in zip(answers, CHECK_NAMES, strict=True)]
        assert all(v.status == "ok" for v in verdicts)
        failed = [v.check for v in verdicts if v.failed]
        assert failed == ([] if variant.kind == "reference" else [failing_check(outcomes[variant.key], CHECK_NAMES)])
        assert verdicts[-1].confidence == 0.6  # quality = the reference's real score, bug or not


class StallsFirst:
    """The real bwrap backend on a machine too busy to run each program the first ``stalls`` times."""

    def __init__(self, stalls: int) -> None:
        self.real, self.stalls, self.calls = make_backend(SandboxConfig(backend="bwrap")), stalls, {}
        self.name, self.revision = self.real.name, self.real.revision

    def run(self, code, public_dir, work_dir, limits):
        self.calls[code] = self.calls.get(code, 0) + 1
        if self.calls[code] <= self.stalls:
            raise ExecutionStalled("bwrap execution stalled: the machine held it back 240 s of 240 s")
        return self.real.run(code, public_dir, work_dir, limits)


@bwrap
def test_a_variant_the_machine_held_back_is_run_again_not_lost_or_scored(task, tmp_path, monkeypatch):
    monkeypatch.setenv("WMRL_CACHE", str(tmp_path / "cache"))
    variants = [v for v in make_variants([task], per_task=1, heldout_fraction=0.0) if v.kind == "crash"]
    limits, runtime = SandboxLimits(timeout_s=60), table_runtime()
    backend = StallsFirst(stalls=STALL_ATTEMPTS - 1)
    outcome = real_outcomes(variants, {task.task_id: task}, backend, limits, runtime, tmp_path / "work")[variants[0].key]
    assert outcome.source == "executed" and outcome.error_type == "ValueError"  # the program's own outcome
    assert list(backend.calls.values()) == [STALL_ATTEMPTS]

    monkeypatch.setenv("WMRL_CACHE", str(tmp_path / "cache2"))
    with pytest.raises(ExecutionStalled):  # never run: the build stops, and caches nothing for it
        real_outcomes(variants, {task.task_id: task}, StallsFirst(stalls=STALL_ATTEMPTS), limits, runtime,
                      tmp_path / "work")
    assert not list((tmp_path / "cache2").rglob("*.json"))


def test_held_out_variants_and_too_long_examples_are_left_out(task):
    variants = make_variants([task], per_task=1, heldout_fraction=0.0)
    from dataclasses import replace

    from wmrl.world_model_data.variants import Outcome

    held = [replace(v, heldout=True) for v in variants]
    ok = {v.key: Outcome("ok", True, 0.6, None, None, "", "", 0.0, "leaderboard") for v in variants}
    data = SFTData([])
    sim = WorldModelContext(60, 0, table_runtime())
    world_model_examples(tokenizer(), held, ok, {task.task_id: "x"}, sim, CHECK_NAMES, "short", 2000, 100000, data)
    assert data.examples == []
    world_model_examples(tokenizer(), variants, ok, {task.task_id: "x"}, sim, CHECK_NAMES, "short", 2000, 50, data)
    assert data.examples == [] and data.skipped["world_model"] == len(variants) * 8
    only = SFTData([])  # a quality-only variant (sft_all_references) gives the quality check's example alone
    world_model_examples(tokenizer(), [replace(variants[0], quality_only=True)], ok, {task.task_id: "x"}, sim,
                         CHECK_NAMES, "short", 2000, 100000, only)
    assert only.counts["world_model"] == 1
    assert "Predicted leaderboard position" in tokenizer().decode(list(only.examples[0].target_ids))


def test_world_model_sft_leaves_out_what_the_pre_check_settles(task):
    from wmrl.sandbox.probe import SandboxRuntime
    from wmrl.world_model_data.examples import left_to_the_world_model

    probed = SandboxRuntime("3.11", (), frozenset({"os", "warnings", "numpy", "pandas", "sklearn"}), "probe:test")
    variants = make_variants([task], per_task=1, heldout_fraction=0.0)
    kept = {v.kind for v in left_to_the_world_model(variants, [task], probed)}
    assert "not_installed" not in kept and "wrong_file" not in kept  # settled exactly by the pre-check
    assert {"reference", "crash", "invalid_submission"} <= kept  # only running them tells


def test_sft_executes_no_held_out_variant(task):
    """The held-out variants are the world model evaluation's: `wmrl sft` neither trains on them nor
    runs them."""
    from wmrl.world_model.config import WorldModelConfig
    from wmrl.world_model_data.examples import world_model_sft_variants

    everything = make_variants([task], per_task=1, heldout_fraction=0.0)
    assert world_model_sft_variants([task], WorldModelConfig(precheck=False, heldout_fraction=0.0, sft_variants_per_task=1),
                                    table_runtime()) == everything
    assert world_model_sft_variants([task], WorldModelConfig(precheck=False, heldout_fraction=1.0, sft_variants_per_task=1),
                                    table_runtime()) == []


def test_all_references_add_every_trainable_leaderboard_solution_once_with_its_real_score(tmp_path):
    """world_model.sft_all_references: every reference of the training tasks that is not held out, unmodified,
    scored by its leaderboard run (nothing executed); the held-out ones (the evaluation's) never."""
    from wmrl.world_model.config import WorldModelConfig
    from wmrl.world_model_data.examples import world_model_sft_variants
    from wmrl.world_model_data.variants import REFERENCE as UNMODIFIED
    from wmrl.world_model_data.variants import reference_variant

    task = task_with_references(tmp_path, 8)

    def sft(**keys) -> list:
        return world_model_sft_variants([task], WorldModelConfig(precheck=False, sft_variants_per_task=1, **keys),
                                        table_runtime())

    few, every = sft(heldout_fraction=0.0), sft(heldout_fraction=0.0, sft_all_references=True)
    assert [v for v in every if v not in few] and every[:len(few)] == few
    unmodified = [v for v in every if v.kind == UNMODIFIED]
    assert sorted(v.reference for v in unmodified) == [f"r{i}" for i in range(8)]  # each once
    assert {v.reference: v.reference_score for v in unmodified} == {f"r{i}": i / 8 for i in range(8)}
    assert all(v.quality_only for v in every if v not in few) and not any(v.quality_only for v in few)
    half = sft(heldout_fraction=0.5, sft_all_references=True)
    held_out = {ref.name for ref in task.reference_solutions() if reference_variant(task, ref, 0.5).heldout}
    assert held_out and not held_out & {v.reference for v in half}
    assert {v.reference for v in half if v.kind == UNMODIFIED} == {f"r{i}" for i in range(8)} - held_out


@bwrap
def test_the_agents_foreign_target_mistake_really_writes_an_invalid_submission(task, tmp_path, monkeypatch):
    """The mistake mined from the rollout records that the pre-check cannot settle: the submission names
    another task's target column. Only running it tells, and it fails the way the agent's did."""
    from wmrl.world_model_data.examples import left_to_the_world_model

    monkeypatch.setenv("WMRL_CACHE", str(tmp_path / "cache"))
    (variant,) = [v for v in make_variants([task], per_task=1, heldout_fraction=0.0, kinds=AGENT_MISTAKES)
                  if v.kind == "foreign_target"]
    assert '{"id": test_ids, "y": pred}' not in variant.code and variant.code.count("test_ids, ") == 1
    assert left_to_the_world_model([variant], [task], table_runtime()) == [variant]
    outcome = real_outcomes([variant], {task.task_id: task}, make_backend(SandboxConfig(backend="bwrap")),
                            SandboxLimits(timeout_s=60), table_runtime(), tmp_path / "work")[variant.key]
    assert outcome.status == "ok" and not outcome.valid and outcome.error_type == "InvalidSubmission"
    assert "missing column" in outcome.error_text and "'y'" in outcome.error_text


def test_policy_samples_are_the_policys_first_replies_drawn_once_per_build(task, tmp_path, monkeypatch):
    from wmrl.world_model_data.examples import policy_samples

    monkeypatch.setenv("WMRL_CACHE", str(tmp_path / "cache"))
    replies = ["I fit a tree.\n```python\nprint(1)\n```", "no code at all", "A tree.\n```python\nprint(2)\n```"]
    drawn = itertools.count()
    generator = ScriptedGenerator(lambda prompt, call: replies[next(drawn) % 3])
    context = PromptContext(max_turns=1, timeout_s=60, gpus=0, runtime=table_runtime())
    policy = AgentPolicy(generator, SamplingParams(), {task.task_id: "Competition: Tiny\nBegin.\n"},
                         AgentConfig(prompt_style="short", max_turns=1), context)
    assert policy_samples(policy, [task], 0, seed=0, build="b") == [] and not generator.calls
    samples = policy_samples(policy, [task], 3, seed=0, build="b")
    (prompts,) = generator.calls
    assert prompts == [policy.first_prompt(task.task_id)] * 3  # the run's first-turn prompt, three draws
    assert [s.code for s in samples] == ["print(1)\n", "print(2)\n"]  # the reply without code is no solution
    assert all(s.kind == POLICY_SAMPLE and s.task_id == task.task_id and not s.heldout for s in samples)
    assert policy_samples(policy, [task], 3, seed=0, build="b") == samples and len(generator.calls) == 1  # cached
    policy_samples(policy, [task], 3, seed=0, build="other")  # another policy build: drawn again
    policy_samples(policy, [task], 3, seed=0, build=None)  # no build hash: nothing to key a cache by
    policy_samples(policy, [task], 3, seed=0, build=None)
    assert len(generator.calls) == 4
