"""The world model as an Environment: batched checks, garbage never crashes and is counted, pre-check settles."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from agent_support import ScriptedGenerator, tokenizer

from wmrl.agent.config import AgentConfig
from wmrl.agent.policy import AgentPolicy
from wmrl.agent.prompts import PromptContext
from wmrl.generation.base import SamplingParams
from wmrl.rollout import Submission
from wmrl.sandbox.probe import table_runtime
from wmrl.world_model.backends import Completion, InProcessBackend
from wmrl.world_model.config import WorldModelConfig
from wmrl.world_model.env import TaskCase, WorldModelEnvironment
from wmrl.world_model.precheck import DataInventory
from wmrl.world_model.prompts import CHECK_NAMES

CODE = ("import pandas as pd\ntrain = pd.read_csv(f'{DATA_DIR}/train.csv')\n"
        "train[['id', 'y']].to_csv(SUBMISSION_PATH, index=False)\n")


def answer(verdict="pass", confidence=0.6, **extra):
    return json.dumps({"reason": "r", "verdict": verdict, "confidence": confidence, "error_type": None,
                       "error_line": None, "env_feedback": "", **extra})


@pytest.fixture
def case(tmp_path: Path) -> TaskCase:
    d = tmp_path / "public"
    d.mkdir()
    (d / "train.csv").write_text("id,x,y\n1,0.5,1\n2,1.5,0\n")
    return TaskCase("Competition: T\n=== DATA INVENTORY ===\n- train.csv\nBegin.\n", DataInventory.from_dir(d), 50)


def check_of(prompt_ids) -> str:
    text = tokenizer().decode(prompt_ids)
    titles = {"IMPORTS AND NAMES": "imports", "API CALLS": "api", "FILE AND COLUMN": "files_columns",
              "SHAPES AND DTYPES": "shapes", "COMPUTE BUDGET": "compute", "OTHER RUNTIME": "runtime",
              "SUBMISSION VALIDITY": "submission", "SOLUTION QUALITY": "quality"}
    return next(v for k, v in titles.items() if f"CHECK: {k}" in text)


def env_with(reply, case, **cfg) -> tuple[WorldModelEnvironment, ScriptedGenerator]:
    gen = ScriptedGenerator(lambda p, k: reply(check_of(p)))
    backend = InProcessBackend(gen, max_new_tokens=cfg.pop("max_new_tokens", 256))
    return WorldModelEnvironment(backend, {"t": case}, WorldModelConfig(**cfg), table_runtime()), gen


def test_all_checks_of_all_submissions_go_in_one_batch(case):
    env, gen = env_with(lambda c: answer(confidence=0.7 if c == "quality" else 0.1), case)
    fbs = env.evaluate([Submission(f"0/0/{i}/0", "t", CODE) for i in range(3)])
    assert len(gen.calls) == 1 and len(gen.calls[0]) == 3 * len(CHECK_NAMES)
    assert [f.score for f in fbs] == pytest.approx([0.7] * 3) and all(f.valid for f in fbs)
    assert fbs[0].tokens > 0 and len(fbs[0].details["verdicts"]) == 8 and len(fbs[0].details["raw"]) == 8


def test_a_failing_check_gives_its_traceback_as_feedback(case):
    tb = "Traceback (most recent call last):\n  File \"solution.py\", line 2\nKeyError: 'label'"
    env, _ = env_with(lambda c: answer("fail", 0.9, env_feedback=tb, error_line=2) if c == "files_columns"
                      else answer(), case)
    fb = env.evaluate([Submission("k", "t", CODE)])[0]
    assert (fb.valid, fb.status, fb.details["deciding"]) == (False, "error", "files_columns")
    assert "KeyError: 'label'" in fb.text and fb.score == pytest.approx(0.1)


GARBAGE = {
    "non_json": "The code looks correct and will run fine.",
    "wrong_keys": json.dumps({"ok": True, "score": 0.9}),
    "out_of_range": answer("fail", 7.5),
    "empty": "",
    "ten_times_too_long": "{" + '"reason": "' + "x" * 20000,
}


@pytest.mark.parametrize("kind", sorted(GARBAGE))
def test_garbage_never_crashes_a_rollout_and_shows_in_the_counts(kind, case):
    env, _ = env_with(lambda c: GARBAGE[kind], case)
    policy = AgentPolicy(ScriptedGenerator(lambda p, k: f"Fit.\n```python\n{CODE}```"),
                         SamplingParams(max_new_tokens=200), {"t": "Competition: T\nBegin.\n"},
                         AgentConfig(prompt_style="short", max_turns=2),
                         PromptContext(2, 60, 0, table_runtime()))
    groups = policy.rollout(0, ["t"], 2, [env], np.random.default_rng(0))
    scores = [t.score for t in groups[0]]
    assert all(s is not None and 0.0 <= s <= 1.0 for s in scores)
    stats = env.stats()
    assert stats["calls"] == 2 * 2 * 8
    if kind == "out_of_range":
        assert stats["verdict:repaired"] == 32 and stats["problem:confidence_out_of_range"] == 32
    else:
        assert stats["verdict:fallback"] == 32 and stats["parse_fallback_rate"] == 1.0
        assert scores == [0.5, 0.5]  # the fallback: every check passes, quality = the prior


def test_an_over_long_prompt_is_a_counted_fallback_not_a_crash(case):
    gen = ScriptedGenerator(lambda p, k: answer())
    backend = InProcessBackend(gen, max_new_tokens=64, max_context_tokens=100)
    env = WorldModelEnvironment(backend, {"t": case}, WorldModelConfig(), table_runtime())
    fb = env.evaluate([Submission("k", "t", CODE)])[0]
    assert fb.score == 0.5 and env.stats()["problem:rejected"] == 8 and gen.calls == []


def test_precheck_settles_a_certain_failure_without_calling_the_model(case):
    env, gen = env_with(lambda c: answer(), case)
    bad = CODE.replace("x = ", "").replace("train.csv'", "nope.csv'")
    fb = env.evaluate([Submission("k", "t", bad)])[0]
    assert gen.calls == [] and fb.score == 0.0 and not fb.valid and fb.details["precheck"]
    assert "FileNotFoundError" in fb.text and env.stats()["precheck_settled"] == 1


def test_precheck_off_asks_the_model(case):
    env, gen = env_with(lambda c: answer(), case, precheck=False)
    env.evaluate([Submission("k", "t", CODE.replace("train.csv'", "nope.csv'"))])
    assert len(gen.calls) == 1 and "precheck_settled" not in env.stats()


def test_a_subset_of_checks_runs_only_those(case):
    env, gen = env_with(lambda c: answer(), case, checks=["files_columns", "quality"])
    env.evaluate([Submission("k", "t", CODE)])
    assert sorted(check_of(p) for p in gen.calls[0]) == ["files_columns", "quality"]


def test_failed_backend_gives_no_score(case):
    class Down:
        def complete(self, requests):
            return [Completion("", error="failed: APIConnectionError: refused") for _ in requests]

    env = WorldModelEnvironment(Down(), {"t": case}, WorldModelConfig(), table_runtime())
    fb = env.evaluate([Submission("k", "t", CODE)])[0]
    assert (fb.score, fb.status) == (None, "failed") and env.stats()["infrastructure_failures"] == 1


@pytest.mark.parametrize("bad, key", [({"checks": ["imports"]}, "checks"), ({"checks": ["vibes", "quality"]},
                                      "checks[0]"), ({"backend": "http"}, "url"), ({"fail_threshold": 0}, "fail_threshold")])
def test_bad_world_model_config_names_the_key(bad, key):
    from wmrl.config import ConfigError

    with pytest.raises(ConfigError, match=re.escape(f"world_model.{key}")):
        WorldModelConfig(**bad).validate()


def test_counts_restored_from_a_checkpointed_state_continue_as_if_never_stopped(case):
    """What a resumed LLM trainer does with the world model's counters (its checkpointed state)."""
    missing = "import pandas as pd\npd.read_csv(f'{DATA_DIR}/missing.csv')\n"  # settled by the pre-check
    first = [Submission("0/0/0/0", "t", CODE), Submission("0/0/1/0", "t", missing)]
    second = [Submission("1/0/0/0", "t", CODE)]

    def reply(check):
        return "not json" if check == "quality" else answer()  # one counted JSON fallback per submission

    straight, _ = env_with(reply, case)
    straight.evaluate(first)
    straight.evaluate(second)
    stopped, _ = env_with(reply, case)
    stopped.evaluate(first)
    state = json.loads(json.dumps(stopped.state_dict()))  # as it travels in a checkpoint
    resumed, _ = env_with(reply, case)
    resumed.load_state_dict(state)
    resumed.evaluate(second)
    assert straight.counts["submissions"] == 3 and straight.counts["precheck_settled"] == 1
    assert straight.counts["verdict:fallback"] == 2
    assert resumed.stats() == straight.stats()
