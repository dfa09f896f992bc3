"""Config section ``tasks``: which task pool a run trains on."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TasksConfig:
    # Root of the task pool; "" means the built-in pool (built by `wmrl tasks build`).
    root: str = ""

    def validate(self, prefix: str = "tasks") -> None:
        pass
