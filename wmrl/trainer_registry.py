"""The trainers a run can name (config key ``trainer``), by import path.

The coordinator drives a trainer through the ``Trainer`` protocol (``coordinator.py``) and finds it
here by name; a trainer module is imported only when a run uses it, so orchestration depends on the
protocol, never on a trainer (``wmrl/trainers/`` sits above it). Adding one is one entry below: its
factory ``(cfg, run_dir, runner, resume) -> Trainer``, what it prepares before a run starts, and
what it supports (learner ranks, a GPU memory plan).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TrainerSpec:
    """What the run wing needs to know of a trainer, so that no code outside this registry branches on
    a trainer's name."""

    factory: str  # "module:attr", a factory ``(cfg, run_dir, runner, resume) -> Trainer``
    # "module:attr", called as ``prepare(cfg, run_path)`` by the coordinator before the trainer is built
    # (every launch route runs it: local, submitit, plain sbatch); None: nothing to prepare
    prepare: str | None = None
    # "module:attr", called as ``initial_policy(cfg, progress=True) -> Path``: builds (cached) the policy a run
    # starts from when the config names none; `wmrl train` trains the trainers that have one, building it
    # first in the foreground, with progress
    initial_policy: str | None = None
    learner_ranks: bool = False  # several coordinator tasks can be its learner ranks (wmrl/learner/follower.py)
    gpu_memory_plan: bool = False  # `wmrl plan` models its GPUs (learner + generator)


TRAINERS: dict[str, TrainerSpec] = {
    # the simulator's softmax policy over the pool's real reference solutions; anchors really executed
    "anchored_sim": TrainerSpec("wmrl.trainers.anchored:make_trainer"),
    # the same over tiny scripts that print their known score (plumbing tests, launch.work=python_work)
    "dry": TrainerSpec("wmrl.trainers.anchored:make_dry_trainer"),
    # the LLM research agent trained with WMRL (wmrl train); its initial policy is resolved (built if
    # needed) and pinned in the run directory before it starts, the trainer only reads the pin
    "llm": TrainerSpec("wmrl.trainers.llm.trainer:make_trainer", prepare="wmrl.sft.pipeline:pinned_initial_policy",
                       initial_policy="wmrl.sft.pipeline:initial_policy_path", learner_ranks=True,
                       gpu_memory_plan=True),
}


def _resolve(path: str) -> Any:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def trainer_spec(name: str) -> TrainerSpec:
    """The registry entry of ``name`` (the config validated it is one of ``TRAINERS``)."""
    return TRAINERS[name]


def trainer_factory(name: str) -> Any:
    """The factory registered under ``name``."""
    return _resolve(TRAINERS[name].factory)


def trains_an_agent(name: str) -> bool:
    """Whether ``name`` trains from an initial policy (what ``wmrl train`` trains)."""
    return TRAINERS[name].initial_policy is not None


def build_initial_policy(name: str, cfg: Any) -> Any:
    """The initial policy of a run of ``name`` (built if needed, with progress): a path."""
    build = TRAINERS[name].initial_policy
    if build is None:
        raise ValueError(f"trainer {name!r} has no initial policy to build")
    return _resolve(build)(cfg, progress=True)


def prepare_run(name: str, cfg: Any, run_path: Any) -> None:
    """The trainer's own preparation of a run (e.g. the LLM trainer pins its initial policy), if any."""
    prepare = TRAINERS[name].prepare
    if prepare is not None:
        _resolve(prepare)(cfg, run_path)
