"""Where the world model's answers come from: an in-process Generator, or an OpenAI-compatible server.

Both take chat messages (system + check prompt) and return the answer text with its token counts, so
the environment above them is the same. Both decode greedily by default (temperature 0), so the same
model gives the same verdicts through either (tested against a real ``transformers serve``).

``error`` on a :class:`Completion` separates two cases the environment treats differently:
``"rejected: ..."`` (the request itself is unusable, e.g. longer than the context: counted as a
fallback verdict, like garbage output) and ``"failed: ..."`` (the server was unreachable or kept
failing past its retries: an infrastructure failure, the submission gets no score).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from wmrl.generation.base import Generator, SamplingParams

Messages = list[dict[str, str]]


@dataclass
class Completion:
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    error: str | None = None  # "rejected: ..." or "failed: ..." (see the module docstring)

    @property
    def failed(self) -> bool:
        return self.error is not None and self.error.startswith("failed")


class WorldModelBackend(Protocol):
    def complete(self, requests: Sequence[Messages]) -> list[Completion]: ...


class InProcessBackend:
    """A frozen Generator in this process; one batched ``generate`` call per ``complete``."""

    def __init__(self, generator: Generator, max_new_tokens: int, temperature: float = 0.0, seed: int = 0,
                 max_context_tokens: int | None = None) -> None:
        self.generator = generator
        self.params = SamplingParams(temperature=temperature, top_p=1.0, max_new_tokens=max_new_tokens, seed=seed)
        limit = max_context_tokens or getattr(generator.tokenizer, "model_max_length", None)
        self.max_context_tokens = int(limit) if limit and limit < 10**9 else None

    def render(self, messages: Messages) -> list[int]:
        tok = self.generator.tokenizer
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return list(tok.encode(text, add_special_tokens=False))

    def complete(self, requests: Sequence[Messages]) -> list[Completion]:
        prompts = [self.render(m) for m in requests]
        out: list[Completion | None] = [None] * len(prompts)
        todo = []
        for i, ids in enumerate(prompts):
            budget = self.max_context_tokens
            if budget is not None and len(ids) + self.params.max_new_tokens > budget:
                out[i] = Completion("", len(ids), 0, 0.0,
                                    f"rejected: prompt of {len(ids)} tokens + {self.params.max_new_tokens} new "
                                    f"exceeds the context of {budget}")
            else:
                todo.append(i)
        if todo:
            gens = self.generator.generate([prompts[i] for i in todo], self.params,
                                           seeds=[self.params.seed] * len(todo))
            for i, gen in zip(todo, gens, strict=True):
                out[i] = Completion(gen.text, len(prompts[i]), len(gen.token_ids), gen.seconds)
        return [c for c in out if c is not None]


class HTTPBackend:
    """An OpenAI-compatible ``/v1/chat/completions`` endpoint (``vllm serve``, ``transformers serve``).

    ``concurrency`` requests are in flight at once; the ``openai`` client retries connection errors,
    408/409/429 and 5xx answers ``retries`` times with backoff, each attempt limited to ``timeout_s``.
    """

    def __init__(self, url: str, model: str, max_new_tokens: int, temperature: float = 0.0, seed: int = 0,
                 concurrency: int = 16, timeout_s: float = 300.0, retries: int = 3) -> None:
        import openai

        self._openai = openai
        self.client = openai.OpenAI(base_url=url, api_key="EMPTY", timeout=timeout_s, max_retries=retries)
        self.model = model
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.seed = seed
        self.concurrency = concurrency

    def _one(self, messages: Messages) -> Completion:
        start = time.perf_counter()
        try:
            response: Any = self.client.chat.completions.create(
                model=self.model, messages=messages, max_tokens=self.max_new_tokens,
                temperature=self.temperature, top_p=1.0, seed=self.seed,
            )
        except self._openai.BadRequestError as err:  # the request itself (e.g. too long): never retried
            return Completion("", 0, 0, time.perf_counter() - start, f"rejected: {str(err)[:300]}")
        except self._openai.OpenAIError as err:  # unreachable / timed out / 5xx past the retries
            return Completion("", 0, 0, time.perf_counter() - start, f"failed: {type(err).__name__}: {str(err)[:300]}")
        text = (response.choices[0].message.content or "") if response.choices else ""
        usage = getattr(response, "usage", None)
        return Completion(text, int(getattr(usage, "prompt_tokens", 0) or 0),
                          int(getattr(usage, "completion_tokens", 0) or 0), time.perf_counter() - start)

    def complete(self, requests: Sequence[Messages]) -> list[Completion]:
        if not requests:
            return []
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(requests))) as pool:
            return list(pool.map(self._one, requests))
