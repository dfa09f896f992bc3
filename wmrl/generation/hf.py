"""The ``transformers`` generation backend: batched, seeded sampling with a KV cache (CPU; GPU fallback).

transformers' ``generate`` draws every row from one global RNG, so a request's tokens would depend on
which other requests share its batch. This loop gives each request its own ``torch.Generator``
seeded from its seed: the same prompt and seed give the same tokens whatever the batching (up to the
float noise of different padding). It reuses transformers' logits warpers for temperature and top-p.

``logprobs`` are the model's own log-probabilities of the sampled tokens (log-softmax of the raw
logits, before temperature and top-p), the quantity the learner's forward pass computes; vLLM's
default ``raw_logprobs`` mode returns the same.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch

from wmrl.generation.base import Generation, SamplingParams
from wmrl.models.loading import load_causal_lm, load_tokenizer


def request_seeds(params: SamplingParams, n: int, seeds: Sequence[int] | None) -> list[int]:
    """Per-request seeds: the caller's, else derived from ``params.seed`` and the request's index."""
    if seeds is not None:
        if len(seeds) != n:
            raise ValueError(f"got {len(seeds)} seeds for {n} prompts")
        return [int(s) for s in seeds]
    return [int(s) for s in np.random.SeedSequence(params.seed).generate_state(n, dtype=np.uint32)]


def stop_token_ids(tokenizer: Any, generation_config: Any = None) -> list[int]:
    """End of turn and end of text: the tokenizer's EOS plus the model's generation-config EOS ids."""
    ids = {tokenizer.eos_token_id}
    configured = getattr(generation_config, "eos_token_id", None)
    ids.update(configured if isinstance(configured, list) else [configured])
    for token in ("<|im_end|>", "<|endoftext|>"):
        token_id = tokenizer.convert_tokens_to_ids(token)
        if isinstance(token_id, int) and token_id != tokenizer.unk_token_id:
            ids.add(token_id)
    return sorted(i for i in ids if i is not None)


class TransformersGenerator:
    """A :class:`~wmrl.generation.base.Generator` around a transformers causal LM."""

    def __init__(self, model: Any, tokenizer: Any, batch_size: int = 16) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.stop_ids = stop_token_ids(tokenizer, getattr(model, "generation_config", None))
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.stop_ids[0]
        # transformers renamed ``past_key_values`` to ``cache`` (5.x deprecation); use what this one takes.
        forward_args = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in forward_args else "past_key_values"

    @classmethod
    def from_path(cls, path: str, dtype: str = "float32", device: str = "auto", batch_size: int = 16) -> TransformersGenerator:
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        return cls(load_causal_lm(path, dtype=dtype, device=device), load_tokenizer(path), batch_size)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def generate(
        self, prompts: Sequence[list[int]], params: SamplingParams, seeds: Sequence[int] | None = None
    ) -> list[Generation]:
        if any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        all_seeds = request_seeds(params, len(prompts), seeds)
        # Similar lengths decode together (less padding); results go back in the caller's order.
        order = sorted(range(len(prompts)), key=lambda i: (len(prompts[i]), i))
        out: list[Generation | None] = [None] * len(prompts)
        for start in range(0, len(order), self.batch_size):
            chunk = order[start: start + self.batch_size]
            for i, gen in zip(chunk, self._batch([prompts[i] for i in chunk], params, [all_seeds[i] for i in chunk])):
                out[i] = gen
        return [g for g in out if g is not None]

    def _warpers(self, params: SamplingParams) -> Any:
        from transformers.generation.logits_process import (
            LogitsProcessorList,
            TemperatureLogitsWarper,
            TopPLogitsWarper,
        )

        warpers = LogitsProcessorList([TemperatureLogitsWarper(params.temperature)])
        if params.top_p < 1.0:
            warpers.append(TopPLogitsWarper(params.top_p))
        return warpers

    @torch.no_grad()
    def _batch(self, prompts: list[list[int]], params: SamplingParams, seeds: list[int]) -> list[Generation]:
        from transformers import DynamicCache

        started = time.perf_counter()
        device = self.device
        width = max(len(p) for p in prompts)
        # Left padding: every row's next token sits in the last column.
        ids = torch.tensor([[self.pad_id] * (width - len(p)) + list(p) for p in prompts], device=device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        # The config gives hybrid models (Qwen3.5: Gated-DeltaNet + attention layers) their per-layer caches.
        cache = DynamicCache(config=self.model.config)
        logits = self.extend(ids, mask, positions, cache, logits_to_keep=1)
        return self.decode(cache, logits, mask, positions[:, -1:], params, seeds, started)

    def extend(self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache: Any,
                logits_to_keep: int = 0) -> torch.Tensor:
        """The model on ``ids`` after what ``cache`` holds (extended in place): the last column's logits."""
        extra = {"logits_to_keep": logits_to_keep} if logits_to_keep else {}
        return self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                          **extra, **{self._cache_kw: cache}).logits[:, -1, :]

    @torch.no_grad()
    def decode(self, cache: Any, logits: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor,
               params: SamplingParams, seeds: list[int], started: float) -> list[Generation]:
        """Draw every row's tokens from a prefilled ``cache``: ``logits`` are the next token's (one row per
        request), ``mask`` covers the cached columns and ``positions`` holds each row's last position."""
        device = self.device
        generators = [torch.Generator().manual_seed(s) for s in seeds]
        warpers = self._warpers(params) if params.temperature > 0 else None
        rows = logits.shape[0]
        tokens: list[list[int]] = [[] for _ in range(rows)]
        logps: list[list[float]] = [[] for _ in range(rows)]
        done = [False] * rows
        stop = set(self.stop_ids)
        for _ in range(params.max_new_tokens):
            logits = logits.float()
            raw_logp = torch.log_softmax(logits, dim=-1)
            if warpers is None:
                chosen = logits.argmax(dim=-1).tolist()
            else:  # temperature and top-p read only the scores, not the ids
                probs = torch.softmax(warpers(None, logits), dim=-1).cpu()
                chosen = [int(torch.multinomial(probs[r], 1, generator=generators[r])) for r in range(rows)]
            for r in range(rows):
                if not done[r]:
                    tokens[r].append(chosen[r])
                    logps[r].append(float(raw_logp[r, chosen[r]]))
                    done[r] = chosen[r] in stop
            if all(done):
                break
            step = torch.tensor([[c if not d or c in stop else self.pad_id] for c, d in zip(chosen, done)],
                                device=device)
            mask = torch.cat([mask, torch.ones(rows, 1, dtype=mask.dtype, device=device)], dim=1)
            positions = positions + 1
            logits = self.extend(step, mask, positions, cache)
        seconds = (time.perf_counter() - started) / rows
        return [
            Generation(
                token_ids=tokens[r],
                logprobs=logps[r],
                text=self.tokenizer.decode(tokens[r], skip_special_tokens=True),
                finish_reason="stop" if tokens[r] and tokens[r][-1] in stop else "length",
                seconds=seconds,
            )
            for r in range(rows)
        ]

    @torch.no_grad()
    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy new values into the live parameters (no reload): names are the model's HF names."""
        live = dict(self.model.named_parameters(remove_duplicate=False))
        live.update(self.model.named_buffers())
        unknown = []
        for name, tensor in named_tensors:
            target = live.get(name)
            if target is None:
                unknown.append(name)
                continue
            if target.shape != tensor.shape:
                raise ValueError(f"update_weights: {name} has shape {tuple(tensor.shape)}, "
                                 f"the model's is {tuple(target.shape)}")
            target.copy_(tensor.to(device=target.device, dtype=target.dtype))
        if unknown:
            raise ValueError(f"update_weights: the model has no parameter named {', '.join(unknown[:5])}"
                             f"{' ...' if len(unknown) > 5 else ''}")
