"""Compute accounting: GPU-seconds per unit of work, summed the way the paper reports GPU-hours."""

from __future__ import annotations

from dataclasses import dataclass

from wmrl.simulate.config import CostConfig


@dataclass
class CostMeter:
    """Counts the work of one run; ``seconds`` prices it with a :class:`CostConfig`."""

    cfg: CostConfig
    executions: int = 0
    wm_calls: int = 0
    trajectories: int = 0
    updates: int = 0

    def charge(self, *, executions: int = 0, wm_calls: int = 0, trajectories: int = 0, updates: int = 0) -> None:
        self.executions += executions
        self.wm_calls += wm_calls
        self.trajectories += trajectories
        self.updates += updates

    def phase_seconds(self) -> dict[str, float]:
        """GPU-seconds per phase (the phases ``wmrl compare`` reports; weight sync is not modelled)."""
        c = self.cfg
        return {
            "generation": self.trajectories * c.gen_seconds,
            "world_model": self.wm_calls * c.wm_call_seconds,
            "learner": self.updates * c.update_seconds,
            "execution": self.executions * c.exec_seconds,
        }

    @property
    def seconds(self) -> float:
        return sum(self.phase_seconds().values())

    @property
    def gpu_hours(self) -> float:
        return self.seconds / 3600.0
