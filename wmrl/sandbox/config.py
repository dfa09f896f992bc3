"""Config section ``sandbox``: how anchor solutions are executed."""

from __future__ import annotations

from dataclasses import dataclass

BACKENDS = ("bwrap", "apptainer", "subprocess")


@dataclass
class SandboxConfig:
    backend: str = "bwrap"
    timeout_s: float = 1200.0  # Appendix D execution budget

    def validate(self, prefix: str = "sandbox") -> None:
        from wmrl.config import check_choice, check_range

        check_choice(f"{prefix}.backend", self.backend, BACKENDS)
        check_range(f"{prefix}.timeout_s", self.timeout_s, 0.0, low_open=True)
