"""What the coordinator drives: the ``Trainer`` protocol every registered trainer implements
(:mod:`wmrl.trainer_registry` finds a trainer by name; the coordinator never imports one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol


class Trainer(Protocol):
    """What the coordinator drives. ``step`` counts finished steps."""

    step: int
    total_steps: int

    def run_step(self) -> dict[str, float]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def state_digest(self) -> str: ...

    def snapshot_dirs(self) -> dict[str, Path]: ...

    def progress(self) -> dict[str, Any]: ...

    def write_plots(self, directory: Path, metrics: list[dict[str, Any]]) -> list[Path]: ...
