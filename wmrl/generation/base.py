"""The generation interface every backend implements (``transformers``, ``vllm``).

Token-in, token-out: prompts are token id lists (the caller renders the chat template once and
extends ids turn by turn), outputs carry the sampled ids and their log-probs, so nothing is
re-tokenised between the sampler and the learner.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    seed: int = 0  # per-request seeds are derived from it, so a batch is reproducible


@dataclass
class Generation:
    token_ids: list[int]  # sampled ids (without the prompt), ending with EOS when it stopped
    logprobs: list[float]  # log pi(token) under the sampling distribution's model, one per token
    text: str  # decoded token_ids, special tokens skipped
    finish_reason: str  # "stop" (EOS / stop id) or "length" (max_new_tokens)
    seconds: float  # wall seconds of the batch this generation was part of, shared equally


class Generator(Protocol):
    """A policy or world-model sampler. ``tokenizer`` is the HF tokenizer of the model."""

    tokenizer: Any

    def generate(
        self, prompts: Sequence[list[int]], params: SamplingParams, seeds: Sequence[int] | None = None
    ) -> list[Generation]: ...

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Serve new weights in place after a learner step (never a reload from disk)."""
        ...
