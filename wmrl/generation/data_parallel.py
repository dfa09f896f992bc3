"""Generation data-parallel across the learner's ranks: every rank's own engine draws a share.

With several learner ranks and an engine on every rank (the colocated vLLM placement: one engine beside
each learner GPU, or ``generation.data_parallel`` with the transformers backend), rank 0 (the
coordinator) still makes every ``generate`` call, and the ranks split it:

    rank 0 (coordinator)                             ranks 1..N-1 (wmrl/learner/follower.py)
    generator.generate(prompts, params)  ── call ─▶  generator.generate(prompts, params, seeds)
      its share [0, n/N) on its engine                 its share on its own engine
      gather ◀──────────────────────────────────────── its generations
      returns all n, in the prompts' order             returns None

Each request keeps the seed one engine would have given it (:func:`request_seeds` over the whole call),
so what a request samples does not depend on which rank draws it (up to the float noise of a different
batch). Rank 0 announces the call on the ranks' :class:`~wmrl.learner.channel.CallChannel`, the same
channel that carries the learner's calls, so the followers meet it in order between learner calls; each
follower's generator registers the call there (:data:`GENERATE`). Weight updates need no call of their
own: each follower feeds its engine from the gathers of the learner's weight sync, which every rank joins.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import torch
import torch.distributed as dist

from wmrl.generation.base import Generation, Generator, SamplingParams
from wmrl.generation.colocation import OffloadableLearner, place
from wmrl.generation.config import GenerationConfig
from wmrl.generation.factory import build_generator
from wmrl.generation.hf import request_seeds
from wmrl.learner.channel import CallChannel
from wmrl.learner.follower import PlacedLearner

GENERATE = "generation.generate"  # the call on the ranks' channel


def share(n: int, rank: int, world_size: int) -> range:
    """The requests of rank ``rank``: contiguous, sizes differing by at most one."""
    base, extra = divmod(n, world_size)
    start = rank * base + min(rank, extra)
    return range(start, start + base + (rank < extra))


class DataParallelGenerator:
    """A generator whose calls every rank's engine serves a share of: rank 0 makes them and announces
    them on ``channel``, the followers register them there (see the module docstring)."""

    def __init__(self, local: Generator, channel: CallChannel) -> None:
        self.local, self.channel = local, channel
        self.tokenizer = local.tokenizer
        self.rank, self.world_size = channel.rank, channel.world_size
        if self.rank != 0:
            channel.register(GENERATE, self.generate)

    def generate(self, prompts: Sequence[list[int]], params: SamplingParams,
                 seeds: Sequence[int] | None = None) -> list[Generation] | None:
        """Rank 0: every request's generation (the followers drew their shares); a follower: None."""
        if self.rank != 0:
            return self._draw_share(prompts, params, list(seeds or ()))
        seeds = request_seeds(params, len(prompts), seeds)
        prompts = [list(p) for p in prompts]
        with self.channel.leading(GENERATE, prompts, params, seeds):
            return self._draw_share(prompts, params, seeds)

    def _draw_share(self, prompts: Sequence[list[int]], params: SamplingParams,
                    seeds: list[int]) -> list[Generation] | None:
        mine = share(len(prompts), self.rank, self.world_size)
        drawn = self.local.generate([prompts[i] for i in mine], params, [seeds[i] for i in mine]) if mine else []
        shares: list[list[Generation]] | None = [[] for _ in range(self.world_size)] if self.rank == 0 else None
        dist.gather_object(drawn, shares, dst=0)
        return None if shares is None else [g for part in shares for g in part]

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        self.local.update_weights(named_tensors)


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def place_on_rank(learner: OffloadableLearner, model_path: str | Path, channel: CallChannel, cfg: GenerationConfig,
                  dtype: str) -> tuple[PlacedLearner, Generator]:
    """This rank's learner and generator as the placement wants them (colocation.place), the generator
    data-parallel over the ranks' ``channel`` when every rank holds one (``cfg.data_parallel_over``)."""
    placed, generator = place(learner, lambda: build_generator(model_path, cfg, dtype), cfg)
    if cfg.data_parallel_over(world_size()):
        generator = DataParallelGenerator(generator, channel)  # type: ignore[assignment]
    return placed, generator
