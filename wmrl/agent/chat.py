"""Token-in, token-out chat: the first prompt is rendered once, later turns only APPEND ids.

Re-rendering a growing conversation and re-tokenising it drifts (a reply's tokens need not survive
decode + encode, and templates rewrite earlier turns), so the learner would train on ids the sampler
never produced. Instead the trajectory is ``prompt ids + generated ids + observation ids + generated
ids ...``, where the observation ids are the user turn exactly as the model's chat template renders it
(end of the assistant turn, user header, the observation, end of turn, assistant header), learned once
from the template with placeholder messages, so any template (ChatML, Qwen3, Llama) works.
"""

from __future__ import annotations

from typing import Any

_ASSISTANT = "\u2063ASSISTANT\u2063"  # placeholders no real message contains
_USER = "\u2063USER\u2063"


class ChatTokens:
    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        base = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
        two = tokenizer.apply_chat_template(
            [*base, {"role": "assistant", "content": _ASSISTANT}, {"role": "user", "content": _USER}],
            tokenize=False, add_generation_prompt=True,
        )
        after = two[two.index(_ASSISTANT) + len(_ASSISTANT):]
        before_obs, after_obs = after.split(_USER)
        self.open_ids = self.encode(before_obs)  # e.g. "<|im_end|>\n<|im_start|>user\n"
        self.close_ids = self.encode(after_obs)  # e.g. "<|im_end|>\n<|im_start|>assistant\n"

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def first_prompt(self, messages: list[dict[str, str]]) -> list[int]:
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return self.encode(text)

    def observation(self, generated_ids: list[int], observation_ids: list[int]) -> list[int]:
        """The ids to append after a reply: the user turn holding the observation, then the assistant
        header. A reply that already ended with the end-of-turn token does not get a second one."""
        opening = self.open_ids
        if generated_ids and opening and generated_ids[-1] == opening[0]:
            opening = opening[1:]
        return opening + observation_ids + self.close_ids

    def truncate(self, text: str, budget: int) -> tuple[list[int], str]:
        """Observation ids within ``budget`` tokens: the head and the tail (where tracebacks and the
        result line are) around a marker. Returns the ids and their text."""
        ids = self.encode(text)
        if len(ids) <= budget:
            return ids, text
        marker = self.encode(f"\n[... {len(ids)} tokens, truncated ...]\n")
        keep = max(budget - len(marker), 2)
        head = keep // 4
        kept = ids[:head] + marker + ids[len(ids) - (keep - head):]
        return kept, self.tokenizer.decode(kept)
