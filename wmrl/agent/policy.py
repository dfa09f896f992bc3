"""The research agent as a :class:`~wmrl.rollout.Policy`: multi-turn, token-in/token-out, batched.

Per turn, ONE ``generate`` call covers every still-active trajectory of the step (all groups); each
reply is parsed (:mod:`wmrl.agent.parse`); the submissions go to their group's environment (groups that
share an environment object are evaluated in one batch, different environments concurrently, so real
executions of anchor groups overlap world-model inference); a failed parse gets feedback without an
environment call and scores 0. The observation (feedback text, truncated to ``observation_tokens``) is
appended as a user turn in ids; a trajectory stops early only when the next turn would not fit in the
context.

The trajectory's score (``agent.keep``):

- ``best``: its best submission over the turns: a valid one before an invalid one, then the higher
  score, then the earlier turn (an executed invalid submission scores 0; a predicted-invalid one keeps
  the world model's capped r_hat, the same number the world model gives the final solution of an
  anchor trajectory); no code in any turn -> 0.0 and no final code;
- ``last``: the last turn's score (0.0 when that reply had no code);
- either way, a turn whose environment gave no score (infrastructure failure) makes the trajectory's
  score ``None``: which attempt was best is unknown, so the step drops its group from training.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from wmrl.agent.chat import ChatTokens
from wmrl.agent.config import AgentConfig
from wmrl.agent.parse import ParsedReply, parse_feedback, parse_reply
from wmrl.agent.prompts import PromptContext, agent_messages, system_prompt
from wmrl.generation.base import Generator, SamplingParams
from wmrl.rollout import EXECUTED, Environment, Feedback, Groups, Submission, Trajectory, Turn

NO_SCORE_TEXT = "The environment could not evaluate this attempt (infrastructure failure); it is not counted.\n"


def _phase(env: Environment) -> str:
    return "execution" if env.role == EXECUTED else "world_model"


class AgentPolicy:
    def __init__(self, generator: Generator, params: SamplingParams, overviews: Mapping[str, str],
                 cfg: AgentConfig, context: PromptContext) -> None:
        cfg.validate()
        self.generator = generator
        self.params = params
        self.cfg = cfg
        self.chat = ChatTokens(generator.tokenizer)
        self.system = system_prompt(context, cfg.prompt_style)
        self.overviews = dict(overviews)
        self._first: dict[str, list[int]] = {}
        limit = cfg.max_context_tokens or getattr(generator.tokenizer, "model_max_length", 0) or 0
        self.max_context = int(limit) if 0 < limit < 10**9 else None

    def first_prompt(self, task_id: str) -> list[int]:
        if task_id not in self._first:
            self._first[task_id] = self.chat.first_prompt(agent_messages(self.system, self.overviews[task_id]))
        return self._first[task_id]

    def rollout(self, step: int, task_ids: Sequence[str], n: int, envs: Sequence[Environment],
                rng: np.random.Generator) -> Groups:
        groups = [[Trajectory(task_id, g, i, envs[g].role) for i in range(n)] for g, task_id in enumerate(task_ids)]
        flat = [t for group in groups for t in group]
        context = {id(t): [] for t in flat}  # ids so far (prompts + replies)
        pending = {id(t): self.first_prompt(t.task_id) for t in flat}  # ids to append before the next reply
        active = [t for t in flat if self._fits(context[id(t)], pending[id(t)])]
        for turn in range(self.cfg.max_turns):
            if not active:
                break
            prompts = [context[id(t)] + pending[id(t)] for t in active]
            seeds = [int(s) for s in rng.integers(0, 2**31 - 1, size=len(active))]
            generations = self.generator.generate(prompts, self.params, seeds=seeds)
            replies: list[ParsedReply] = []
            for t, prompt, gen in zip(active, prompts, generations, strict=True):
                reply = parse_reply(gen.text)
                replies.append(reply)
                t.turns.append(Turn(pending[id(t)], list(gen.token_ids), list(gen.logprobs), gen.text, reply.code,
                                    reply.error, None, gen.seconds))
                t.seconds["generation"] = t.seconds.get("generation", 0.0) + gen.seconds
                t.tokens["generation"] = t.tokens.get("generation", 0) + len(gen.token_ids)
                context[id(t)] = prompt + list(gen.token_ids)
            self._evaluate(step, turn, active, replies, envs)
            if turn == self.cfg.max_turns - 1:
                break
            still = []
            for t in active:
                last = t.turns[-1]
                text = last.feedback.text if last.feedback and last.feedback.text else NO_SCORE_TEXT
                obs_ids, _ = self.chat.truncate(text, self.cfg.observation_tokens)
                pending[id(t)] = self.chat.observation(last.generated_ids, obs_ids)
                if self._fits(context[id(t)], pending[id(t)]):
                    still.append(t)
            active = still
        for t in flat:
            self._keep(t)
        return groups

    def _fits(self, context: list[int], pending: list[int]) -> bool:
        if self.max_context is None:
            return True
        return len(context) + len(pending) + self.params.max_new_tokens <= self.max_context

    def _evaluate(self, step: int, turn: int, active: list[Trajectory], replies: list[ParsedReply],
                  envs: Sequence[Environment]) -> None:
        """Feedback for every active trajectory: one batch per distinct environment, run concurrently."""
        batches: dict[int, list[tuple[Trajectory, Submission]]] = defaultdict(list)
        for t, reply in zip(active, replies, strict=True):
            if reply.code is None:
                key = f"{step}/{t.group}/{t.index}/{turn}"
                t.turns[-1].feedback = Feedback(key, parse_feedback(reply), 0.0, False, "no_code")
                continue
            sub = Submission.at(step, t.group, t.index, turn, t.task_id, reply.code)
            batches[id(envs[t.group])].append((t, sub))
        env_of = {id(envs[t.group]): envs[t.group] for t in active}

        def run(env_id: int) -> tuple[int, list[Feedback]]:
            return env_id, env_of[env_id].evaluate([sub for _, sub in batches[env_id]])

        with ThreadPoolExecutor(max_workers=max(len(batches), 1)) as pool:
            results = list(pool.map(run, list(batches)))
        for env_id, feedbacks in results:
            phase = _phase(env_of[env_id])
            for (t, sub), fb in zip(batches[env_id], feedbacks, strict=True):
                if fb.key != sub.key:
                    raise RuntimeError(f"environment answered {fb.key!r} for submission {sub.key!r}")
                t.turns[-1].feedback = fb
                t.seconds[phase] = t.seconds.get(phase, 0.0) + fb.seconds
                if fb.tokens:
                    t.tokens[phase] = t.tokens.get(phase, 0) + fb.tokens

    def _keep(self, t: Trajectory) -> None:
        feedbacks = [turn.feedback for turn in t.turns]
        coded = [i for i, turn in enumerate(t.turns) if turn.code]
        if any(fb is None or fb.score is None for fb in feedbacks):
            t.score, t.kept_turn = None, None
            t.final_code = t.turns[coded[-1]].code if coded else None
            return
        if self.cfg.keep == "last":
            kept = len(t.turns) - 1 if t.turns else None
        else:  # valid before invalid, then the higher score, then the earlier turn
            kept = max(coded, key=lambda i: (feedbacks[i].valid, feedbacks[i].score, -i)) if coded else None
        t.kept_turn = kept
        t.final_code = t.turns[kept].code if kept is not None else None
        t.score = float(feedbacks[kept].score or 0.0) if kept is not None else 0.0
