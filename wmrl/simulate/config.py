"""Config section ``simulator``: the synthetic testbed of ``wmrl simulate``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class SimulatorConfig:
    steps: int = 200

    def validate(self, prefix: str = "simulator") -> None:
        from wmrl.config import check_range

        check_range(f"{prefix}.steps", self.steps, 1)
