"""Config section ``launch``: where the coordinator and the anchor workers run."""

from __future__ import annotations

from dataclasses import dataclass

EXECUTORS = ("local", "slurm")


@dataclass
class LaunchConfig:
    executor: str = "local"
    workers: int = 2

    def validate(self, prefix: str = "launch") -> None:
        from wmrl.config import check_choice, check_range

        check_choice(f"{prefix}.executor", self.executor, EXECUTORS)
        check_range(f"{prefix}.workers", self.workers, 1)
