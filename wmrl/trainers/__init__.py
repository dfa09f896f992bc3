"""Trainers: what the coordinator runs, chosen by the config key ``trainer``.

Every trainer runs the one WMRL step (``wmrl/step.py``) inside the one loop shell (``wmrl/loop.py``) with
its own Policy, Environments and Learner. The names are registered in ``wmrl/trainer_registry.py``
(by import path: the coordinator below never imports a trainer).
"""

from wmrl.trainer_registry import TRAINERS, trainer_factory

__all__ = ["TRAINERS", "trainer_factory"]
