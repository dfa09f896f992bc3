"""Sandboxed execution of untrusted solutions: one contract (``base.SandboxBackend``), three backends::

backend = make_backend(cfg.sandbox)
result = backend.run(code, public_dir, work_dir, limits_from_config(cfg.sandbox))
"""

from __future__ import annotations

from wmrl.sandbox.apptainer import ApptainerBackend
from wmrl.sandbox.base import STATUSES, ExecutionResult, SandboxBackend, SandboxLimits
from wmrl.sandbox.bwrap import BwrapBackend
from wmrl.sandbox.config import BACKENDS, SandboxConfig, limits_from_config
from wmrl.sandbox.runspec import SUBMISSION_NAME, ExecutionStalled, SandboxError
from wmrl.sandbox.subprocess_backend import SubprocessBackend


def make_backend(cfg: SandboxConfig) -> SandboxBackend:
    """The backend named by ``cfg.backend`` (validated: a bad name is a ``ConfigError``)."""
    cfg.validate()
    if cfg.backend == "bwrap":
        return BwrapBackend(cfg)
    if cfg.backend == "apptainer":
        return ApptainerBackend(cfg)
    return SubprocessBackend(cfg)


__all__ = [
    "BACKENDS",
    "STATUSES",
    "SUBMISSION_NAME",
    "ExecutionResult",
    "ExecutionStalled",
    "SandboxBackend",
    "SandboxConfig",
    "SandboxError",
    "SandboxLimits",
    "limits_from_config",
    "make_backend",
]
