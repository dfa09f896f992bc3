"""Rollout records: what the learner needs round-trips; `wmrl rollouts show` reads like the conversation."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from agent_support import ScriptedGenerator

from wmrl.agent.config import AgentConfig
from wmrl.agent.policy import AgentPolicy
from wmrl.agent.prompts import PromptContext
from wmrl.agent.records import read_rollouts, rollout_path, write_rollouts
from wmrl.cli.main import main
from wmrl.generation.base import SamplingParams
from wmrl.rollout import EXECUTED
from wmrl.sandbox.probe import table_runtime
from wmrl.world_model.backends import InProcessBackend
from wmrl.world_model.config import WorldModelConfig
from wmrl.world_model.env import TaskCase, WorldModelEnvironment
from wmrl.world_model.precheck import DataInventory

CODE = "import pandas as pd\ntrain = pd.read_csv(f'{DATA_DIR}/train.csv')\ntrain.to_csv(SUBMISSION_PATH)\n"
ANSWER = json.dumps({"reason": "fine", "verdict": "pass", "confidence": 0.4, "error_type": None,
                     "error_line": None, "env_feedback": "val acc 0.8"})


@pytest.fixture
def groups(tmp_path: Path):
    public = tmp_path / "public"
    public.mkdir()
    (public / "train.csv").write_text("id,y\n1,0\n")
    case = TaskCase("Competition: T\nBegin.\n", DataInventory.from_dir(public), 40)
    env = WorldModelEnvironment(InProcessBackend(ScriptedGenerator(lambda p, k: ANSWER), 128), {"t": case},
                                WorldModelConfig(checks=["files_columns", "quality"]), table_runtime())
    replies = ["We read train.csv.\n```python\n" + CODE + "```", "No code this time."]
    policy = AgentPolicy(ScriptedGenerator(lambda p, k: replies[k]), SamplingParams(max_new_tokens=200),
                         {"t": "Competition: T\nBegin.\n"}, AgentConfig(prompt_style="short", max_turns=2),
                         PromptContext(2, 60, 0, table_runtime()))
    return policy.rollout(7, ["t", "t"], 2, [env, env], np.random.default_rng(0))


def test_records_round_trip_everything_the_learner_needs(groups, tmp_path):
    anchor = groups[0][0]  # an anchor trajectory: its true score and its pair's world-model score
    anchor.role, anchor.score, anchor.pair_score = EXECUTED, 0.3, 0.4
    write_rollouts(tmp_path / "run", 7, groups, {"rho": 1.5})
    header, back = read_rollouts(tmp_path / "run", 7)
    assert header["extra"] == {"rho": 1.5} and len(back) == 2 and [len(g) for g in back] == [2, 2]
    for g, g2 in zip(groups, back, strict=True):
        for t, t2 in zip(g, g2, strict=True):
            assert t2.token_ids() == t.token_ids() and t2.loss_mask() == t.loss_mask()
            assert np.allclose(t2.logprobs(), t.logprobs(), atol=1e-6)
            assert (t2.score, t2.kept_turn, t2.final_code, t2.role) == (t.score, t.kept_turn, t.final_code, t.role)
            assert t2.seconds == t.seconds and t2.tokens == t.tokens
            assert t2.turns[0].feedback.details == t.turns[0].feedback.details
    assert (back[0][0].r, back[0][0].r_hat, back[0][0].pair_score) == (0.3, 0.4, 0.4)
    world_model = back[1][0]  # a world-model trajectory's score is its r_hat; it has no r
    assert (world_model.r, world_model.r_hat) == (None, groups[1][0].score)


def test_the_shared_first_prompt_is_stored_once(groups, tmp_path):
    path = write_rollouts(tmp_path / "run", 7, groups)
    lines = gzip.decompress(path.read_bytes()).decode().splitlines()
    assert len(lines) == 1 + 4
    assert all(json.loads(line)["turns"][0]["prompt_ids"] == "first_prompt" for line in lines[1:])


def test_rewriting_a_step_replaces_it(groups, tmp_path):
    write_rollouts(tmp_path / "run", 7, groups)
    write_rollouts(tmp_path / "run", 7, groups[:1])
    assert len(read_rollouts(tmp_path / "run", 7)[1]) == 1
    assert [p.name for p in rollout_path(tmp_path / "run", 7).parent.iterdir()] == ["step-000007.jsonl.gz"]


def test_show_prints_what_the_agent_wrote_and_what_the_world_model_said(groups, tmp_path, capsys):
    write_rollouts(tmp_path / "run", 7, groups)
    assert main(["rollouts", "show", str(tmp_path / "run"), "--step", "7", "--group", "1"]) == 0
    out = capsys.readouterr().out
    assert "group 1 trajectory 0" in out and "group 0" not in out
    assert "We read train.csv." in out and "NOT RUN (no_code" in out
    assert "files_columns" in out and "quality" in out and "val acc 0.8" in out


def test_show_names_the_steps_that_exist(groups, tmp_path, capsys):
    write_rollouts(tmp_path / "run", 7, groups)
    assert main(["rollouts", "show", str(tmp_path / "run"), "--step", "3"]) == 2
    assert "steps written: 7" in capsys.readouterr().err
