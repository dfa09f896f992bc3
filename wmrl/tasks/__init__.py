"""Tasks: public side for the sandbox, private side for the grader; loaders for three layouts,
the built-in offline pool and the agent's task overview (see docs/tasks.md).

Names are imported lazily: ``wmrl.config`` imports ``wmrl.tasks.config``, and loading a config
must not pull in pandas and scikit-learn.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "LAYOUTS": "layouts",
    "detect_layout": "layouts",
    "load_task": "layouts",
    "build_overview": "overview",
    "task_overview": "overview",
    "default_pool_root": "pool",
    "ensure_builtin_pool": "pool",
    "find_task": "pool",
    "load_pool": "pool",
    "ReferenceSolution": "task",
    "Task": "task",
    "TaskError": "task",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"wmrl.tasks.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'wmrl.tasks' has no attribute {name!r}")
