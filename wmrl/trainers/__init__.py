"""Trainers: what the coordinator runs, chosen by the config key ``trainer``.

Every trainer runs the one WMRL step (``wmrl/step.py``) with its own Policy, Environments and
Learner. A trainer is a factory ``(cfg, run_dir, runner, resume) -> Trainer`` (the protocol in
``wmrl/orchestration/coordinator.py``); adding one is one line below. This module imports nothing,
so the config can list the names without loading a trainer.
"""

from __future__ import annotations

import importlib
from typing import Any

TRAINERS: dict[str, str] = {
    # the simulator's softmax policy over the pool's real reference solutions; anchors really executed
    "anchored_sim": "wmrl.trainers.anchored:make_trainer",
    # the same over tiny scripts that print their known score (plumbing tests, launch.work=python_work)
    "dry": "wmrl.trainers.anchored:make_dry_trainer",
    # the LLM research agent trained with WMRL (wmrl train)
    "llm": "wmrl.trainers.llm:make_trainer",
}


def trainer_factory(name: str) -> Any:
    """The factory registered under ``name`` (the config validated it is one of ``TRAINERS``)."""
    module, _, attr = TRAINERS[name].partition(":")
    return getattr(importlib.import_module(module), attr)
