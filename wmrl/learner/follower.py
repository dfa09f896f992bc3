"""Several learner ranks behind one coordinator: rank 0 leads, every other rank follows.

Only rank 0 runs the coordinator (run lock, spool, calibration, world model, tracking, generation);
ranks 1.. hold their share of the learner and, when generation is data-parallel (the colocated vLLM
placement with several ranks, wmrl/generation/data_parallel.py), an engine of their own. Every collective
of the learner (the update, the weight sync's gathers, checkpoint save and load) must be entered by all
ranks together, so rank 0's :class:`LeaderLearner` announces each call, with its arguments, on the
ranks' :class:`~wmrl.learner.channel.CallChannel` before making it, and :func:`follow` makes the call
each follower registered under that name:

    rank 0 (coordinator)                         ranks 1..N-1 (follow)
    learner = lead(cfg, model_path)   ── path ─▶ learner = GRPOLearner(cfg, path)
    learner.update(groups, A, w)      ── call ─▶ learner.update(groups, A, w)      (the step's batch)
    learner.named_parameters(dtype)   ── call ─▶ drain(learner.weight_buckets(dtype)) (gathers only)
                                                  or generator.update_weights(...)  (its own engine)
    generator.generate(prompts, ...)  ── call ─▶ registered by wmrl/generation/data_parallel.py
    learner.save_checkpoint(root, s)  ── call ─▶ learner.save_checkpoint(root, s)
    learner.load_checkpoint(path)     ── call ─▶ learner.load_checkpoint(path)     (rank 0 decides)
    learner.release()  (also at exit) ── stop ─▶ return

A follower waits for the next call as long as a step takes (the channel's own timeout, a week), and a
rank 0 that dies between calls ends it at once with :class:`~wmrl.learner.channel.LeaderGone`
(wmrl/learner/channel.py). A requeued job restarts every task: rank 0 resumes from its coordinator
snapshot and its ``load_checkpoint`` call brings the followers to the same learner checkpoint. If rank 0
dies inside a call the followers wait in that collective until the learner group's timeout and exit
with an error.
"""

from __future__ import annotations

import atexit
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from wmrl.learner.channel import CallChannel
from wmrl.learner.config import LearnerConfig
from wmrl.learner.distributed import init_distributed
from wmrl.learner.grpo import GRPOLearner
from wmrl.learner.weights import drain, flatten
from wmrl.rollout import Groups

# The learner's calls on the channel (the names only travel; each rank registers what it does).
UPDATE, WEIGHT_SYNC, SAVE, LOAD = "learner.update", "learner.weight_sync", "learner.save", "learner.load"


class PlacedLearner(Protocol):
    """The learner the trainer holds, however it is placed: rank 0's :class:`LeaderLearner`, or the
    colocated placement's wrapper around it (wmrl/generation/colocation.py)."""

    cfg: LearnerConfig
    rank: int
    world_size: int

    @property
    def engine(self) -> Any: ...  # the DeepSpeed engine (``engine.module`` is the policy)

    def update(self, groups: Groups, advantages: np.ndarray, weights: np.ndarray) -> dict[str, float]: ...

    def named_parameters(self, dtype: torch.dtype | None = None) -> Iterator[tuple[str, torch.Tensor]]: ...

    def save_checkpoint(self, root: str | Path, step: int) -> Path: ...

    def load_checkpoint(self, path: str | Path) -> int: ...


class LeaderLearner:
    """Rank 0's learner: each collective call is announced to the followers, then made here. In a world
    of one the channel is inert and this is the learner itself."""

    def __init__(self, learner: GRPOLearner, channel: CallChannel) -> None:
        self.learner, self.channel = learner, channel
        self.cfg, self.rank, self.world_size = learner.cfg, learner.rank, learner.world_size

    @property
    def engine(self) -> Any:
        return self.learner.engine

    @property
    def updates(self) -> int:
        return self.learner.updates

    def update(self, groups: Groups, advantages: np.ndarray, weights: np.ndarray) -> dict[str, float]:
        with self.channel.leading(UPDATE, groups, advantages, weights):
            return self.learner.update(groups, advantages, weights)

    def weight_buckets(self, dtype: torch.dtype | None = None) -> Iterator[list[tuple[str, torch.Tensor]]]:
        with self.channel.leading(WEIGHT_SYNC, dtype):
            yield from self.learner.weight_buckets(dtype)

    def named_parameters(self, dtype: torch.dtype | None = None) -> Iterator[tuple[str, torch.Tensor]]:
        return flatten(self.weight_buckets(dtype))

    def save_checkpoint(self, root: str | Path, step: int) -> Path:
        with self.channel.leading(SAVE, str(root), step):
            return self.learner.save_checkpoint(root, step)

    def load_checkpoint(self, path: str | Path) -> int:
        with self.channel.leading(LOAD, str(path)):
            return self.learner.load_checkpoint(path)

    def offload_states(self) -> None:  # each rank places its own share: no call to announce
        self.learner.offload_states()

    def reload_states(self) -> None:
        self.learner.reload_states()

    def release(self) -> None:
        """Let the followers return (registered at exit too, see :meth:`CallChannel.release`)."""
        self.channel.release()


def lead(cfg: LearnerConfig, model_path: str | Path) -> LeaderLearner:
    """Rank 0's learner, leading the other ranks (if any) through their call channel."""
    rank, _ = init_distributed()
    if rank != 0:
        raise RuntimeError(f"rank {rank} follows (wmrl.learner.follower.follow); lead() is for rank 0")
    channel = CallChannel()
    channel.share([str(Path(model_path).resolve())])  # the initial policy rank 0 chose
    leader = LeaderLearner(GRPOLearner(cfg, model_path), channel)
    atexit.register(leader.release)
    return leader


class WeightsTaker(Protocol):
    """What a follower's own engine is to the learner: where the weight sync's tensors go."""

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None: ...


# ``place_generator(learner, model_path, channel) -> (learner, generator)`` on a follower: its own engine
# beside its learner share, which registers the generation calls it serves on ``channel``.
PlaceGenerator = Callable[[GRPOLearner, str, CallChannel], tuple[PlacedLearner, WeightsTaker]]


def follow(cfg: LearnerConfig, place_generator: PlaceGenerator | None = None) -> int:
    """A follower rank's whole life: build the learner rank 0 names, then make its calls until it
    releases them. Returns the number of calls made.

    With ``place_generator`` (generation data-parallel across the ranks, wmrl/generation/data_parallel.py)
    the weight sync's gathers feed this rank's engine instead of being drained."""
    rank, _ = init_distributed()
    if rank == 0:
        raise RuntimeError("rank 0 leads (wmrl.learner.follower.lead); follow() is for ranks 1..N-1")
    channel = CallChannel()
    (model_path,) = channel.share([None])
    learner = GRPOLearner(cfg, model_path)
    placed: PlacedLearner = learner
    weights_to: Callable[[Iterable[tuple[str, torch.Tensor]]], None] | None = None
    if place_generator is not None:
        placed, generator = place_generator(learner, model_path, channel)
        weights_to = generator.update_weights
    _register_learner_calls(channel, placed, learner, weights_to)
    made = channel.serve()
    # Released: nothing collective follows on this rank. Tearing the process group down here, not in
    # the interpreter's exit, keeps gloo's threads from aborting the process (SIGABRT, "terminate called
    # without an active exception", seen under load) while rank 0 still works.
    torch.distributed.destroy_process_group()
    return made


def _register_learner_calls(channel: CallChannel, placed: PlacedLearner, learner: GRPOLearner,
                            weights_to: Callable[[Iterable[tuple[str, torch.Tensor]]], None] | None) -> None:
    """What a follower does for each learner call: the placed learner's (its states brought back to
    the GPU first when colocated), the weight sync drained unless an engine of this rank takes it."""
    channel.register(UPDATE, placed.update)
    channel.register(SAVE, placed.save_checkpoint)
    channel.register(LOAD, placed.load_checkpoint)
    if weights_to is None:
        channel.register(WEIGHT_SYNC, lambda dtype: drain(learner.weight_buckets(dtype)))
    else:
        feed = weights_to
        channel.register(WEIGHT_SYNC, lambda dtype: feed(placed.named_parameters(dtype)))
