"""The colocated placement's schedule: vLLM and the learner on the same GPU, taking turns.

One GPU holds either the generator or the learner's training states, as verl and OpenRLHF do:

- before generating: the learner's model and optimizer states go to host memory
  (:meth:`Offloadable.offload_states`), then vLLM's KV cache comes back (``wake_up(["kv_cache"])``);
- before a learner update: vLLM sleeps (``sleep(level)``: weights to host memory or discarded, KV cache
  freed), then the learner's states come back (:meth:`Offloadable.reload_states`);
- for the weight update after a learner step: vLLM's weights come back (``wake_up(["weights"])``) while
  the learner's states are still on the GPU, and the new weights are copied in by CUDA IPC.

The two wrappers put these switches in front of the calls the trainer already makes (``generate``,
``update``, ``update_weights``, checkpoints), so the step itself does not know about placement. Each
switch is idempotent and timed (:attr:`Colocation.seconds`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from wmrl.generation.base import Generation, Generator, SamplingParams
from wmrl.generation.config import GenerationConfig
from wmrl.learner.follower import PlacedLearner

SLEEP_TAGS = ("weights", "kv_cache")  # what vLLM's sleep frees, in the order wmrl wakes them


class SleepingGenerator(Generator, Protocol):
    def sleep(self) -> None: ...

    def wake_up(self, tags: Sequence[str]) -> None: ...


class Offloadable(Protocol):
    def offload_states(self) -> None: ...

    def reload_states(self) -> None: ...


class OffloadableLearner(PlacedLearner, Offloadable, Protocol):
    """A learner the placement can move to host memory (rank 0's LeaderLearner, a follower's GRPOLearner)."""


class Colocation:
    """Who holds the GPU now; each ``for_*`` method makes room for the next call, if needed."""

    def __init__(self, generator: SleepingGenerator, learner: Offloadable, learner_on_gpu: bool = True) -> None:
        self.generator, self.learner = generator, learner
        self.asleep: set[str] = set()  # vLLM's tags not on the GPU
        self.learner_on_gpu = learner_on_gpu
        self.seconds = {"sleep": 0.0, "wake_weights": 0.0, "wake_kv_cache": 0.0, "offload": 0.0, "reload": 0.0}

    def _timed(self, key: str, fn: Any, *args: Any) -> None:
        started = time.perf_counter()
        fn(*args)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.seconds[key] += time.perf_counter() - started

    def _wake(self, tag: str) -> None:
        if tag in self.asleep:
            self._timed(f"wake_{tag}", self.generator.wake_up, [tag])
            self.asleep.discard(tag)

    def for_generation(self) -> None:
        """The learner's states to host memory, vLLM whole again."""
        if self.learner_on_gpu:
            self._timed("offload", self.learner.offload_states)
            self.learner_on_gpu = False
        for tag in SLEEP_TAGS:
            self._wake(tag)

    def for_training(self) -> None:
        """vLLM asleep, the learner's states back on the GPU."""
        if not self.asleep:
            self._timed("sleep", self.generator.sleep)
            self.asleep = set(SLEEP_TAGS)
        if not self.learner_on_gpu:
            self._timed("reload", self.learner.reload_states)
            self.learner_on_gpu = True

    def for_weight_update(self) -> None:
        """The learner's weights on the GPU (the IPC source) and vLLM's weights awake (the destination)."""
        if not self.learner_on_gpu:
            self.for_training()
        self._wake("weights")


class ColocatedGenerator:
    """A generator whose calls first make room for it (see :class:`Colocation`)."""

    def __init__(self, inner: SleepingGenerator, colocation: Colocation) -> None:
        self.inner, self.colocation = inner, colocation
        self.tokenizer = inner.tokenizer

    def generate(self, prompts: Sequence[list[int]], params: SamplingParams,
                 seeds: Sequence[int] | None = None) -> list[Generation]:
        self.colocation.for_generation()
        return self.inner.generate(prompts, params, seeds)

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        self.colocation.for_weight_update()
        self.inner.update_weights(named_tensors)


class ColocatedLearner:
    """A learner whose calls that need its states on the GPU first bring them back."""

    def __init__(self, inner: OffloadableLearner, colocation: Colocation) -> None:
        self.inner, self.colocation = inner, colocation
        self.cfg, self.rank, self.world_size = inner.cfg, inner.rank, inner.world_size

    @property
    def engine(self) -> Any:  # the DeepSpeed engine, wherever its states are now
        return self.inner.engine

    def update(self, groups: Any, advantages: np.ndarray, weights: np.ndarray) -> dict[str, float]:
        self.colocation.for_training()
        return self.inner.update(groups, advantages, weights)

    def named_parameters(self, dtype: torch.dtype | None = None) -> Iterator[tuple[str, torch.Tensor]]:
        self.colocation.for_weight_update()
        return self.inner.named_parameters(dtype)

    def save_checkpoint(self, root: str | Path, step: int) -> Path:
        self.colocation.for_training()
        return self.inner.save_checkpoint(root, step)

    def load_checkpoint(self, path: str | Path) -> int:
        self.colocation.for_training()
        return self.inner.load_checkpoint(path)


def place(learner: OffloadableLearner, build_generator: Callable[[], Generator],
          cfg: GenerationConfig) -> tuple[PlacedLearner, Generator]:
    """The learner and the generator as the placement wants them: wrapped in one :class:`Colocation` for a
    colocated, sleeping vLLM (the learner's states go to host memory before vLLM starts, since vLLM
    checks the GPU's free memory then), as they are otherwise."""
    if cfg.backend != "vllm" or cfg.vllm.placement != "colocated" or cfg.vllm.sleep_level == 0:
        return learner, build_generator()
    learner.offload_states()
    generator = build_generator()
    colocation = Colocation(generator, learner, learner_on_gpu=False)  # type: ignore[arg-type]
    return ColocatedLearner(learner, colocation), ColocatedGenerator(generator, colocation)  # type: ignore[arg-type]
