"""The trainers a run can name (config key ``trainer``), by import path.

The coordinator drives a trainer through the ``Trainer`` protocol (``coordinator.py``) and finds it
here by name; a trainer module is imported only when a run uses it, so orchestration depends on the
protocol, never on a trainer (``wmrl/trainers/`` sits above it). Adding one is one line below: a
factory ``(cfg, run_dir, runner, resume) -> Trainer``.
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
