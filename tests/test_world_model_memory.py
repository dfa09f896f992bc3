"""The executed-solution memory: a graded quality answer learned from really executed solutions."""

from __future__ import annotations

import shutil
from dataclasses import replace

import pytest
from agent_support import ScriptedGenerator
from test_world_model_env import CODE, answer, case, check_of  # noqa: F401 - `case` is a fixture

from wmrl.rollout import Submission
from wmrl.sandbox.probe import table_runtime
from wmrl.world_model.backends import InProcessBackend
from wmrl.world_model.config import WorldModelConfig
from wmrl.world_model.env import WorldModelEnvironment
from wmrl.world_model.memory import MEMORY, Executed, ExecutedMemory

bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed (CI installs it)")

TEMPLATE = """import pandas as pd
from sklearn.ensemble import {model}
train = pd.read_csv(DATA_DIR + "/train.csv")
X, y = train[["x{i}", "z"]], train["y"]
{extra}model = {model}(n_estimators={n})
model.fit(X, y)
pd.DataFrame({{"id": train["id"], "y": model.predict(X)}}).to_csv(SUBMISSION_PATH, index=False)
"""
QUALITY_OF = {"GradientBoostingRegressor": 0.9, "RandomForestRegressor": 0.6, "AdaBoostRegressor": 0.2}
CRASH = "y = y[:-1]\n"


def program(model: str, i: int, n: int = 100, extra: str = "") -> str:
    return TEMPLATE.format(model=model, i=i, n=n, extra=extra)


def executed() -> list[Executed]:
    """Programs whose score follows their model; every one with the truncated target crashes."""
    out = []
    for i in range(6):
        for model, quality in QUALITY_OF.items():
            out.append(Executed("t", program(model, i), quality, True))
            out.append(Executed("t", program(model, i, extra=CRASH), 0.0, False))
    return out


def test_new_code_is_ranked_by_what_its_executed_neighbours_scored():
    memory = ExecutedMemory(executed())
    unseen = [program(model, 9, n=300) for model in QUALITY_OF]  # a feature and a setting never executed
    predictions = memory.predict(["t"] * 3, unseen)
    assert not any(p.exact for p in predictions)
    quality = [p.quality for p in predictions]
    assert quality[0] > quality[1] > quality[2]  # the order of the real scores of their model
    assert all(0.0 <= q <= 1.0 for q in quality) and len(set(quality)) == 3  # graded, not buckets


def test_a_line_right_in_one_task_and_wrong_in_another_is_told_apart_by_task():
    """The agent's foreign_target mistake: one task's submission line written in another task's code.
    Each target column is valid in its own task and invalid in the other; no weight of a column alone
    can say so, only its pairing with the task."""
    targets = {"a": "label_a", "b": "label_b"}

    def solution(i: int, column: str) -> str:
        return program("GradientBoostingRegressor", i).replace('"y": model', f'"{column}": model')

    examples = []
    for i in range(6):
        for task, own in targets.items():
            other = next(column for t, column in targets.items() if t != task)
            examples += [Executed(task, solution(i, own), 0.8, True), Executed(task, solution(i, other), 0.0, False)]
    memory = ExecutedMemory(examples)
    predictions = memory.predict(["a", "b", "b", "a"], [solution(9, "label_a"), solution(9, "label_b"),
                                                        solution(9, "label_a"), solution(9, "label_b")])
    assert not any(p.exact for p in predictions)
    own_a, own_b, foreign_in_b, foreign_in_a = (p.p_valid for p in predictions)
    assert min(own_a, own_b) > 0.5 > max(foreign_in_a, foreign_in_b)


def test_a_mistake_the_memory_saw_fail_lowers_the_prediction():
    memory = ExecutedMemory(executed())
    runs, crashes = memory.predict(["t", "t"], [program("GradientBoostingRegressor", 9),
                                               program("GradientBoostingRegressor", 9, extra=CRASH)])
    assert runs.p_valid > 0.5 > crashes.p_valid
    assert crashes.quality < runs.quality / 2


def test_a_solution_held_verbatim_gets_its_real_outcome():
    memory = ExecutedMemory(executed())
    crashed = program("AdaBoostRegressor", 2, extra=CRASH)
    (same,) = memory.predict(["t"], [crashed])
    assert same.exact and (same.quality, same.p_valid) == (0.0, 0.0)
    (other_task,) = memory.predict(["u"], [crashed])  # the same code for another task is another solution
    assert not other_task.exact


def test_added_solutions_refit_the_models_and_duplicates_count_once():
    memory = ExecutedMemory(executed())
    query = program("RandomForestRegressor", 9, n=300)
    before = memory.predict(["t"], [query])[0].quality
    new = [Executed("t", program("RandomForestRegressor", i, n=300), 1.0, True) for i in range(6)]
    assert memory.add(new) == 6 and memory.add(new) == 0 and len(memory) == len(executed()) + 6
    after = memory.predict(["t"], [query])[0].quality
    assert after > before + 0.1
    assert ExecutedMemory(executed()).predict(["t"], [query])[0].quality == before  # deterministic


def test_one_class_memories_still_answer_and_an_empty_one_says_why():
    valid_only = ExecutedMemory([e for e in executed() if e.valid])
    assert valid_only.predict(["t"], [program("GradientBoostingRegressor", 9, extra=CRASH)])[0].p_valid == 1.0
    failures_only = ExecutedMemory([e for e in executed() if not e.valid])
    (p,) = failures_only.predict(["t"], [program("GradientBoostingRegressor", 9)])
    assert (p.p_valid, p.quality) == (0.0, 0.0)
    with pytest.raises(ValueError, match="memory is empty"):
        ExecutedMemory().predict(["t"], ["print(1)"])


def test_the_memory_answers_the_quality_check_and_the_llm_the_others(case):  # noqa: F811
    memory = ExecutedMemory([Executed("t", CODE, 0.35, True), Executed("t", CODE + "# other\n", 0.9, True)])
    gen = ScriptedGenerator(lambda p, k: answer("fail", 0.2) if check_of(p) == "runtime" else answer())
    env = WorldModelEnvironment(InProcessBackend(gen, 64), {"t": case},
                                WorldModelConfig(checks=["runtime", "submission", "quality"]), table_runtime(),
                                memory=memory)
    (fb,) = env.evaluate([Submission("k", "t", CODE)])
    assert [check_of(p) for p in gen.calls[0]] == ["runtime", "submission"]  # never the quality check
    quality = fb.details["verdicts"][-1]
    assert (quality["check"], quality["source"], quality["confidence"]) == ("quality", MEMORY, 0.35)
    assert fb.score == pytest.approx(0.35) and fb.valid  # min(q, 1 - 0.2): the LLM's failure caps as before
    stats = env.stats()
    assert (stats["calls"], stats["memory_quality"], stats["memory_exact"]) == (2, 1, 1)


@bwrap
def test_the_memory_starts_from_the_training_references_and_their_executed_variants(tmp_path, monkeypatch):
    """world_model.memory: every non-held-out reference with its leaderboard score, the variants the SFT
    executes and the agent's own mistakes (really run in bwrap), and the policy's samples, each once; the
    held-out references (the evaluation's) never, nor what the pre-check settles; every program as the
    agent writes it, without the pool's header (a sample that repeats a reference is that reference)."""
    from test_sft_data import task_with_references

    from wmrl.config import load_config
    from wmrl.configs import TINY_CONFIG
    from wmrl.world_model_data.examples import memory_examples
    from wmrl.world_model_data.variants import (
        POLICY_SAMPLE,
        SolutionVariant,
        clean_reference,
        reference_variant,
    )

    monkeypatch.setenv("WMRL_CACHE", str(tmp_path / "cache"))
    task = task_with_references(tmp_path, 4)
    cfg = load_config(str(TINY_CONFIG))
    cfg = replace(cfg, world_model=replace(cfg.world_model, sft_variants_per_task=1, heldout_fraction=0.5))
    clean = {ref.name: clean_reference(ref.code) for ref in task.reference_solutions()}
    held_out = {clean[ref.name] for ref in task.reference_solutions() if reference_variant(task, ref, 0.5).heldout}
    kept = next(ref for ref in task.reference_solutions() if clean[ref.name] not in held_out)
    written = clean[kept.name]  # the policy writes a reference as its SFT showed it: without the header
    deeper = written.replace("max_depth=", "max_depth=1 + ")  # a new program that runs and scores
    undefined = written.replace("model.fit(", "modell.fit(")  # a NameError the pre-check settles
    samples = [SolutionVariant(task.task_id, POLICY_SAMPLE, POLICY_SAMPLE, code, False, 0.0)
               for code in (written, deeper, undefined, deeper)]
    examples = memory_examples(cfg, [task], table_runtime(), samples, progress=False)
    assert len({e.key for e in examples}) == len(examples)  # each solution once
    assert not any("Reference solution" in e.code for e in examples)  # the header labels a reference's strength
    references = {e.code: e.score for e in examples if e.code in clean.values()}
    assert held_out and not held_out & {e.code for e in examples}
    assert references == {clean[r.name]: r.position_score for r in task.reference_solutions()
                          if clean[r.name] not in held_out}  # the repeated reference kept its leaderboard score
    (sample,) = [e for e in examples if e.code == deeper]
    assert sample.valid and 0.0 < sample.score <= 1.0 and undefined not in {e.code for e in examples}
    broken = [e for e in examples if e.code not in references and e.code != deeper]
    assert broken and all(not e.valid and e.score == 0.0 for e in broken)  # really run: each mistake fails
    assert any('"id": test_ids, "y"' not in e.code and "max_depth" in e.code for e in broken)  # foreign_target


def turn(code: str | None, score: float | None, valid: bool = True):
    from wmrl.rollout import Feedback, Turn

    return Turn([1], [2], [0.0], "reply", code, None if code else "no_code",
                Feedback("k", "", score, valid, "ok" if valid else "error"))


def test_the_anchor_groups_executed_solutions_are_what_the_memory_learns():
    from wmrl.rollout import Trajectory
    from wmrl.world_model.memory import executed_solutions

    anchor = [Trajectory("t", 0, 0, "executed", [turn("a = 1", 0.0, False), turn("a = 2", 0.7)]),
              Trajectory("t", 0, 1, "executed", [turn(None, 0.0, False), turn("a = 3", None)])]
    predicted = [Trajectory("t", 1, 0, "world_model", [turn("a = 4", 0.9)])]
    learned = executed_solutions([anchor, predicted], [True, False])
    # every executed turn with code and a real score; never a no-code reply, an infrastructure failure
    # (score None) or a world-model group (its score is a prediction)
    assert learned == [Executed("t", "a = 1", 0.0, False), Executed("t", "a = 2", 0.7, True)]


def test_a_resumed_run_rebuilds_the_memory_it_had_at_its_checkpoint(tmp_path):
    from wmrl.world_model.memory import OnlineLog

    log = OnlineLog(tmp_path / "memory.jsonl")
    assert log.read(5) == [] and log.rewind(3) == []  # nothing learned yet: nothing created either
    assert not log.path.exists()
    steps = [[Executed("t", f"a = {s}{i}", 0.5, True) for i in range(2)] for s in range(3)]
    for step, examples in enumerate(steps):
        log.append(step, examples)
    with log.path.open("a") as f:
        f.write('{"step": 2, "task_id": "t", "co')  # killed mid-write
    assert log.read(2) == steps[0] + steps[1]
    # resumed at the checkpoint after step 1 (step index 2 is replayed and logged again)
    assert log.rewind(2) == steps[0] + steps[1]
    log.append(2, steps[2])
    assert log.read(10) == steps[0] + steps[1] + steps[2]
    assert len(log.path.read_text().splitlines()) == 6
