"""The multi-turn agent loop: token-in/token-out without drift, exact loss mask, batching, keep rules."""

from __future__ import annotations

import numpy as np
import pytest
from agent_support import ScriptedGenerator, tokenizer

from wmrl.agent.config import AgentConfig
from wmrl.agent.policy import AgentPolicy
from wmrl.agent.prompts import PromptContext
from wmrl.generation.base import SamplingParams
from wmrl.rollout import EXECUTED, WORLD_MODEL, Feedback
from wmrl.sandbox.probe import table_runtime

OVERVIEWS = {"task-a": "Competition: A\nBegin.\n", "task-b": "Competition: B\nBegin.\n"}


def code_reply(n: int) -> str:
    return f"We try variant {n}.\n\n```python\nprint({n})\n```"


class ScoreEnv:
    """Scores a submission by the number it prints; records every batch it was given."""

    def __init__(self, role=WORLD_MODEL, text="Execution finished.\n" * 3, fail_keys=(), invalid=()):
        self.role, self.text, self.fail_keys, self.invalid = role, text, set(fail_keys), set(invalid)
        self.batches = []

    def evaluate(self, submissions):
        self.batches.append(list(submissions))
        out = []
        for s in submissions:
            n = int(s.code.strip()[len("print("):-1])
            if s.key in self.fail_keys:
                out.append(Feedback(s.key, "", None, False, "failed", 0.1))
            else:
                valid = s.key not in self.invalid
                out.append(Feedback(s.key, self.text, n / 10 if valid else 0.0, valid, "ok" if valid else "error", 0.2))
        return out


def policy(gen, **cfg) -> AgentPolicy:
    ctx = PromptContext(max_turns=cfg.get("max_turns", 3), timeout_s=60, gpus=0, runtime=table_runtime())
    return AgentPolicy(gen, SamplingParams(max_new_tokens=64), OVERVIEWS, AgentConfig(prompt_style="short", **cfg), ctx)


def turn_of(prompt_ids: list[int]) -> int:
    return tokenizer().decode(prompt_ids).count("<|im_start|>assistant")


def test_every_turns_prompt_is_exactly_the_previous_ids_plus_the_observation():
    gen = ScriptedGenerator(lambda p, k: code_reply(k + 1))
    groups = policy(gen, max_turns=3).rollout(0, ["task-a"], 2, [ScoreEnv()], np.random.default_rng(0))
    for i, traj in enumerate(groups[0]):
        for k, turn in enumerate(traj.turns):
            before = [x for t in traj.turns[:k] for x in t.prompt_ids + t.generated_ids]
            assert gen.calls[k][i] == before + turn.prompt_ids  # what the model saw, no re-tokenising
        assert traj.token_ids() == [x for t in traj.turns for x in t.prompt_ids + t.generated_ids]


def test_ids_are_the_chat_templates_rendering_of_the_conversation():
    gen = ScriptedGenerator(lambda p, k: code_reply(k + 1))
    pol = policy(gen, max_turns=3)
    traj = pol.rollout(0, ["task-a"], 1, [ScoreEnv()], np.random.default_rng(0))[0][0]
    messages = [{"role": "system", "content": pol.system}, {"role": "user", "content": OVERVIEWS["task-a"]}]
    for turn in traj.turns:
        messages.append({"role": "assistant", "content": turn.text})
        if turn is not traj.turns[-1]:
            messages.append({"role": "user", "content": turn.feedback.text})
    rendered = tokenizer().apply_chat_template(messages, tokenize=False)
    assert tokenizer().decode(traj.token_ids()) + "\n" == rendered


def test_loss_mask_covers_exactly_the_generated_tokens_of_every_turn():
    gen = ScriptedGenerator(lambda p, k: code_reply(k + 1))
    traj = policy(gen, max_turns=3).rollout(0, ["task-a"], 1, [ScoreEnv()], np.random.default_rng(0))[0][0]
    ids, mask, logps = traj.token_ids(), traj.loss_mask(), traj.logprobs()
    assert len(ids) == len(mask) == len(logps)
    generated = [x for t in traj.turns for x in t.generated_ids]
    assert [x for x, m in zip(ids, mask, strict=True) if m] == generated
    assert sum(mask) == sum(len(t.generated_ids) for t in traj.turns) and len(traj.turns) == 3
    assert all(lp == 0.0 for lp, m in zip(logps, mask, strict=True) if not m)


def test_one_generate_call_per_turn_covers_every_group():
    gen = ScriptedGenerator(lambda p, k: code_reply(1))
    wm, ex = ScoreEnv(WORLD_MODEL), ScoreEnv(EXECUTED)
    groups = policy(gen, max_turns=2).rollout(3, ["task-a", "task-b", "task-a"], 2, [wm, ex, wm],
                                              np.random.default_rng(0))
    assert [len(c) for c in gen.calls] == [6, 6]
    assert [len(b) for b in wm.batches] == [4, 4] and [len(b) for b in ex.batches] == [2, 2]
    assert {s.task_id for s in ex.batches[0]} == {"task-b"}
    keys = [s.key for b in wm.batches + ex.batches for s in b]
    assert len(keys) == len(set(keys)) and "3/1/0/1" in keys  # step/group/trajectory/turn
    assert groups[1][0].role == EXECUTED and groups[1][0].seconds["execution"] > 0
    assert groups[0][0].seconds["world_model"] > 0


def test_reply_without_code_is_fed_back_without_an_environment_call_and_scores_zero():
    gen = ScriptedGenerator(lambda p, k: "I would fit a forest.")
    env = ScoreEnv()
    traj = policy(gen, max_turns=2).rollout(0, ["task-a"], 1, [env], np.random.default_rng(0))[0][0]
    assert env.batches == []
    assert traj.turns[0].feedback.status == "no_code" and "no fenced Python code block" in traj.turns[0].feedback.text
    assert traj.turns[0].parse_error.startswith("no_code")
    assert traj.score == 0.0 and traj.final_code is None and traj.kept_turn is None


def test_best_rule_keeps_the_best_valid_turn_and_last_rule_the_last():
    replies = {0: code_reply(7), 1: code_reply(9), 2: code_reply(3)}
    for keep, expected in (("best", (0.9, 1)), ("last", (0.3, 2))):
        gen = ScriptedGenerator(lambda p, k: replies[k])
        traj = policy(gen, max_turns=3, keep=keep).rollout(0, ["task-a"], 1, [ScoreEnv()],
                                                          np.random.default_rng(0))[0][0]
        assert (traj.score, traj.kept_turn) == expected
        assert traj.final_code == traj.turns[expected[1]].code


def test_best_rule_prefers_a_valid_submission_over_a_higher_invalid_score():
    gen = ScriptedGenerator(lambda p, k: code_reply([2, 9][k]))
    env = ScoreEnv(invalid={"0/0/0/1"})
    traj = policy(gen, max_turns=2).rollout(0, ["task-a"], 1, [env], np.random.default_rng(0))[0][0]
    assert (traj.score, traj.kept_turn) == (0.2, 0)


def test_an_unscored_turn_makes_the_trajectory_unscored():
    gen = ScriptedGenerator(lambda p, k: code_reply(5))
    env = ScoreEnv(fail_keys={"0/0/0/0"})
    traj = policy(gen, max_turns=2).rollout(0, ["task-a"], 1, [env], np.random.default_rng(0))[0][0]
    assert traj.score is None and traj.final_code == "print(5)\n"
    assert "infrastructure failure" in tokenizer().decode(traj.turns[1].prompt_ids)


def test_observation_is_truncated_to_its_token_budget():
    gen = ScriptedGenerator(lambda p, k: code_reply(1))
    long_text = "".join(f"line {i} of printed output\n" for i in range(2000)) + "KeyError: 'label'\n"
    traj = policy(gen, max_turns=2, observation_tokens=64).rollout(
        0, ["task-a"], 1, [ScoreEnv(text=long_text)], np.random.default_rng(0))[0][0]
    overhead = len(tokenizer().encode("<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n"))
    assert len(traj.turns[1].prompt_ids) <= 64 + overhead + 1
    shown = tokenizer().decode(traj.turns[1].prompt_ids)
    assert "truncated" in shown and "KeyError: 'label'" in shown  # the tail (traceback, result) survives


def test_trajectory_stops_before_a_turn_that_would_overflow_the_context():
    gen = ScriptedGenerator(lambda p, k: code_reply(1))
    first = policy(gen).first_prompt("task-a")
    limit = len(first) + 64 + 30  # room for one turn, not for the observation plus a second reply
    traj = policy(gen, max_turns=3, max_context_tokens=limit).rollout(
        0, ["task-a"], 1, [ScoreEnv()], np.random.default_rng(0))[0][0]
    assert len(traj.turns) == 1 and traj.score == 0.1


def test_sampling_seeds_come_from_the_step_rng():
    seen = []
    gen = ScriptedGenerator(lambda p, k: code_reply(1))
    original = gen.generate

    def spy(prompts, params, seeds=None):
        seen.append(list(seeds))
        return original(prompts, params, seeds)

    gen.generate = spy
    pol = policy(gen, max_turns=1)
    pol.rollout(0, ["task-a"], 3, [ScoreEnv()], np.random.default_rng(5))
    pol.rollout(0, ["task-a"], 3, [ScoreEnv()], np.random.default_rng(5))
    assert seen[0] == seen[1] and len(set(seen[0])) == 3


@pytest.mark.parametrize("bad", [{"keep": "first"}, {"max_turns": 0}, {"prompt_style": "long"}])
def test_bad_agent_config_names_the_key(bad):
    from wmrl.config import ConfigError

    with pytest.raises(ConfigError, match=f"agent.{next(iter(bad))}"):
        AgentConfig(**bad).validate()
