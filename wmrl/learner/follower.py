"""Several learner ranks behind one coordinator: rank 0 leads, every other rank follows.

Only rank 0 runs the coordinator (run lock, spool, calibration, world model, tracking, generation);
ranks 1.. hold their share of the learner and, when generation is data-parallel (the colocated vLLM
placement with several ranks, wmrl/generation/data_parallel.py), an engine of their own. Every collective of the learner (the update,
the weight sync's gathers, checkpoint save and load) must be entered by all ranks together, so rank 0's
:class:`LeaderLearner` broadcasts each call, with its arguments, before making it, and :func:`follow`
makes the same call on every other rank:

    rank 0 (coordinator)                         ranks 1..N-1 (follow)
    learner = lead(cfg, model_path)   ── path ─▶ learner = GRPOLearner(cfg, path)
    learner.update(groups, A, w)      ── call ─▶ learner.update(groups, A, w)      (the step's batch)
    learner.named_parameters(dtype)   ── call ─▶ drain(learner.weight_buckets(dtype)) (gathers only)
                                                  or generator.update_weights(...)  (its own engine)
    generator.generate(prompts, ...)  ── call ─▶ generator.generate(prompts, ...)   (its share)
    learner.save_checkpoint(root, s)  ── call ─▶ learner.save_checkpoint(root, s)
    learner.load_checkpoint(path)     ── call ─▶ learner.load_checkpoint(path)     (rank 0 decides)
    learner.release()  (also at exit) ── stop ─▶ return

A requeued job restarts every task: rank 0 resumes from its coordinator snapshot and its
``load_checkpoint`` call brings the followers to the same learner checkpoint. If rank 0 dies inside a
call the followers wait in that collective until the process group's timeout and exit with an error.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from wmrl.learner.config import LearnerConfig
from wmrl.learner.distributed import broadcast_objects, init_distributed
from wmrl.learner.weights import drain, flatten

log = logging.getLogger(__name__)
STOP = "stop"


class LeaderLearner:
    """Rank 0's learner: each collective call is broadcast to the followers, then made here."""

    def __init__(self, learner: Any) -> None:
        self.learner = learner
        self._between_calls = True  # False while a call is under way (no "stop" may be sent then)

    def __getattr__(self, name: str) -> Any:  # rank, world_size, cfg, engine, ...: the learner's own
        return getattr(self.learner, name)

    def _announce(self, call: str, *args: Any) -> None:
        broadcast_objects([(call, args)])

    @contextlib.contextmanager
    def leading(self, call: str, *args: Any) -> Iterator[None]:
        """Announce ``call`` to the followers, then make it here (no "stop" may be sent in between)."""
        self._between_calls = False
        self._announce(call, *args)
        yield
        self._between_calls = True

    def update(self, *args: Any) -> dict[str, float]:
        with self.leading("update", *args):
            return self.learner.update(*args)

    def weight_buckets(self, dtype: torch.dtype | None = None) -> Iterator[list[tuple[str, torch.Tensor]]]:
        with self.leading("weight_buckets", dtype):
            yield from self.learner.weight_buckets(dtype)

    def named_parameters(self, dtype: torch.dtype | None = None) -> Iterator[tuple[str, torch.Tensor]]:
        return flatten(self.weight_buckets(dtype))

    def save_checkpoint(self, root: str | Path, step: int) -> Path:
        with self.leading("save_checkpoint", str(root), step):
            return self.learner.save_checkpoint(root, step)

    def load_checkpoint(self, path: str | Path) -> int:
        with self.leading("load_checkpoint", str(path)):
            return self.learner.load_checkpoint(path)

    def release(self) -> None:
        """Let the followers return (once, and only between calls: inside one they are in its
        collectives). Registered to run at exit, so a coordinator that ends in any way releases them."""
        if not self._between_calls:
            return
        self._between_calls = False
        try:
            self._announce(STOP)
        except (RuntimeError, ValueError) as err:  # followers already gone (the job is being torn down)
            log.warning("could not release the follower ranks: %s", err)


def lead(cfg: LearnerConfig, model_path: str | Path) -> Any:
    """Rank 0's learner: a plain :class:`GRPOLearner` in a world of one, else a :class:`LeaderLearner`."""
    from wmrl.learner.grpo import GRPOLearner

    _, world_size = init_distributed()
    if world_size == 1:
        return GRPOLearner(cfg, model_path)
    broadcast_objects([str(Path(model_path).resolve())])  # the initial policy rank 0 chose
    leader = LeaderLearner(GRPOLearner(cfg, model_path))
    atexit.register(leader.release)
    return leader


def follow(cfg: LearnerConfig, place_generator: Callable[[Any, str], tuple[Any, Any]] | None = None) -> int:
    """A follower rank's whole life: build the learner rank 0 names, then repeat its calls until it
    releases them. Returns the number of calls made.

    ``place_generator(learner, model_path) -> (learner, generator)``: this rank's own engine beside its
    learner share, for generation data-parallel across the ranks (wmrl/generation/data_parallel.py):
    rank 0's ``generate`` calls come here too, and the weight sync's gathers feed this engine."""
    from wmrl.learner.grpo import GRPOLearner

    rank, _ = init_distributed()
    if rank == 0:
        raise RuntimeError("rank 0 leads (wmrl.learner.follower.lead); follow() is for ranks 1..N-1")
    (model_path,) = broadcast_objects([None])
    learner, generator = GRPOLearner(cfg, model_path), None
    if place_generator is not None:
        learner, generator = place_generator(learner, model_path)
    calls = 0
    while True:
        ((call, args),) = broadcast_objects([None])
        if call == STOP:
            # Released: nothing collective follows on this rank. Tearing the process group down here,
            # not in the interpreter's exit, keeps gloo's threads from aborting the process (SIGABRT,
            # "terminate called without an active exception", seen under load) while rank 0 still works.
            torch.distributed.destroy_process_group()
            return calls
        if call == "weight_buckets" and generator is not None:
            generator.update_weights(learner.named_parameters(*args))
        elif call == "weight_buckets":
            drain(learner.weight_buckets(*args))
        elif call == "generate":
            if generator is None:
                raise RuntimeError("rank 0 generates data-parallel, but this rank was started without a generator")
            generator.generate(*args)
        else:
            getattr(learner, call)(*args)
        calls += 1
