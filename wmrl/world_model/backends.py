"""Where the world model's answers come from: an in-process Generator, or an OpenAI-compatible server.

Both take chat messages (system + check prompt) and return the answer text with its token counts, so
the environment above them is the same. Both decode greedily by default (temperature 0), so the same
model gives the same verdicts through either (tested against a real ``transformers serve``).

``error`` on a :class:`Completion` separates the cases the environment treats differently:
``"rejected: ..."`` (the request itself is unusable, e.g. longer than the context) and
``"malformed: ..."`` (the model's answer is not text) are counted as fallback verdicts, like garbage
output; ``"failed: ..."`` (the server was unreachable, too slow, or answered with something that is
not a chat completion, past its retries) is an infrastructure failure: the submission gets no score.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from wmrl.generation.base import Generator, SamplingParams

Messages = list[dict[str, str]]


@dataclass
class Completion:
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    error: str | None = None  # "rejected: ...", "malformed: ..." or "failed: ..." (see the module docstring)
    problems: list[str] = field(default_factory=list)  # e.g. "bad_usage": a usable answer, noted

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

    ``concurrency`` requests are in flight at once. Each attempt has a real deadline of ``timeout_s``
    (the ``openai`` client's own timeout only bounds the gap between two reads, so a server that drips
    one byte a second would hold it for ever): an attempt still running at its deadline is abandoned
    and its connection closed. Connection errors, deadlines, 408/409/429/5xx answers and 200 answers
    that are not a chat completion are retried ``retries`` times with backoff, then the request is
    ``failed``. A 400 is ``rejected`` (the request itself is unusable); an answer whose ``content`` is
    not text is ``malformed`` (both fallbacks); unreadable token counts are read as 0 and noted in
    ``problems``. Nothing a server sends makes :meth:`complete` raise.

    ``stop`` (the run's :attr:`wmrl.orchestration.anchors.AnchorRunner.stop_event`): once set, the attempts
    in flight are abandoned within half a second and no new one starts (each request is ``failed``), so a
    coordinator told to stop does not wait on the world model's batch, which runs in a worker thread its
    signal handler cannot reach.
    """

    RETRY_STATUSES = (408, 409, 429)

    def __init__(self, url: str, model: str, max_new_tokens: int, temperature: float = 0.0, seed: int = 0,
                 concurrency: int = 16, timeout_s: float = 300.0, retries: int = 3,
                 stop: threading.Event | None = None) -> None:
        import openai

        self._openai = openai
        # One TLS context for all attempts: building one per client (the default) costs ~0.2 s of CPU.
        self._tls = ssl.create_default_context()
        self.url = url
        self.timeout_s = timeout_s
        self.retries = retries
        self.model = model
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.seed = seed
        self.concurrency = concurrency
        self.stop = stop or threading.Event()

    def _one(self, messages: Messages) -> Completion:
        start = time.perf_counter()
        messages = [{k: _sendable(v) for k, v in m.items()} for m in messages]
        for attempt in range(self.retries + 1):
            if attempt:
                self.stop.wait(min(0.5 * 2 ** (attempt - 1), 8.0))  # the openai client's backoff
            result, retry = (self._stopped(), False) if self.stop.is_set() else self._attempt(messages)
            if not retry or attempt == self.retries:
                result.seconds = time.perf_counter() - start
                return result
        raise AssertionError("unreachable")

    def _attempt(self, messages: Messages) -> tuple[Completion, bool]:
        """One request within its deadline: (the completion, whether a failure is worth retrying)."""
        # A client per attempt, so that closing an abandoned attempt's connection touches no other.
        client = self._openai.OpenAI(base_url=self.url, api_key="EMPTY", timeout=self.timeout_s, max_retries=0,
                                     http_client=self._openai.DefaultHttpxClient(verify=self._tls))
        box: dict[str, Any] = {}

        def call() -> None:
            try:
                box["raw"] = client.chat.completions.with_raw_response.create(
                    model=self.model, messages=messages, max_tokens=self.max_new_tokens,
                    temperature=self.temperature, top_p=1.0, seed=self.seed,
                ).http_response.content
            except BaseException as err:  # noqa: BLE001 - reported to the waiting thread, never raised there
                box["error"] = err

        worker = threading.Thread(target=call, daemon=True, name="wmrl-world-model-http")
        worker.start()
        deadline = time.monotonic() + self.timeout_s
        while worker.is_alive() and not self.stop.is_set() and time.monotonic() < deadline:
            worker.join(min(0.5, max(0.0, deadline - time.monotonic())))
        if worker.is_alive():
            client.close()  # the abandoned read ends at its next byte (or its read timeout)
            if self.stop.is_set():
                return self._stopped(), False
            return Completion("", error=f"failed: Timeout: no complete answer within timeout_s={self.timeout_s:g} s"), True
        client.close()
        err = box.get("error")
        if err is None:
            return _read_completion(box.get("raw", b""))
        if isinstance(err, self._openai.BadRequestError):  # the request itself (e.g. too long): never retried
            return Completion("", error=f"rejected: {str(err)[:300]}"), False
        status = getattr(err, "status_code", None)
        retry = status is None or status in self.RETRY_STATUSES or status >= 500
        return Completion("", error=f"failed: {type(err).__name__}: {str(err)[:300]}"), retry

    @staticmethod
    def _stopped() -> Completion:
        return Completion("", error="failed: Stopped: the coordinator is exiting")

    def complete(self, requests: Sequence[Messages]) -> list[Completion]:
        if not requests:
            return []
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(requests))) as pool:
            return list(pool.map(self._one, requests))


def _sendable(value: str) -> str:
    """Text that encodes as UTF-8 (a lone surrogate in the agent's code would fail the request)."""
    return value.encode("utf-8", "replace").decode("utf-8") if isinstance(value, str) else value


def _token_count(usage: Any, key: str, problems: list[str]) -> int:
    value = usage.get(key, 0) if isinstance(usage, dict) else 0
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        return value or 0
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    problems.append("bad_usage")
    return 0


def _read_completion(raw: bytes) -> tuple[Completion, bool]:
    """A 200 answer's body as a Completion: a body that is no chat completion is a (retried) failure
    of the server; a completion whose content is not text is a ``malformed`` answer of the model."""
    def broken(why: str) -> tuple[Completion, bool]:
        return Completion("", error=f"failed: MalformedResponse: {why}"), True

    try:
        body = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return broken(f"the body is not UTF-8 ({raw[:60]!r})")
    except (ValueError, RecursionError):
        return broken(f"the body is not JSON ({raw[:60]!r})")
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return broken(f"no choices in the body ({raw[:60]!r})")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        return broken("the choice has no message")
    usage = body.get("usage")
    if usage is not None and not isinstance(usage, dict):
        usage = {"prompt_tokens": "?"}
    problems: list[str] = []
    tokens = (_token_count(usage, "prompt_tokens", problems), _token_count(usage, "completion_tokens", problems))
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        return Completion("", *tokens, error=f"malformed: content is a {type(content).__name__}, not text",
                          problems=sorted(set(problems))), False
    return Completion(content or "", *tokens, problems=sorted(set(problems))), False
