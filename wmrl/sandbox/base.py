"""The sandbox contract: run one untrusted solution, return a result record.

A backend never grades and never sees the private side of a task; grading happens outside
(``wmrl.grading``). Backends: ``bwrap`` (local default), ``apptainer`` (clusters),
``subprocess`` (no isolation, opt-in).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

# "timeout": the solution used its time (wall seconds less those it waited for a CPU);
# "memory" / "disk_quota": the supervisor stopped the execution at its memory limit (processes plus
# its tmpfs files) or at its disk quota (everything it wrote); "killed": any other signal death.
STATUSES = ("ok", "error", "timeout", "memory", "disk_quota", "killed")


@dataclass(frozen=True)
class SandboxLimits:
    # The solution's time: wall seconds less those the machine held it back (runnable, waiting for a CPU).
    timeout_s: float = 1200.0
    memory_mb: int = 8192
    max_procs: int = 256
    max_output_bytes: int = 1 << 20  # captured stdout/stderr beyond this are dropped
    gpus: int = 0
    max_file_mb: int = 4096  # largest single file the solution may write (RLIMIT_FSIZE)
    disk_quota_mb: int = 16384  # everything the execution holds on disk, all files together
    max_files: int = 100_000  # files and directories it may hold (bounds the quota's walk too)
    # However long it is held back, it is stopped at this many times timeout_s of wall time: an
    # infrastructure failure (ExecutionStalled), not the solution's timeout.
    max_wall_factor: float = 4.0
    # CPUs the execution is given (sandbox.threads): CPU time at this rate is its own use, so a solution
    # that keeps its own threads waiting (more busy threads than CPUs) gets no credit for their wait.
    cpus: int = 1


@dataclass
class ExecutionResult:
    status: str  # one of STATUSES
    exit_code: int | None
    wall_seconds: float
    cpu_seconds: float
    peak_memory_mb: float
    stdout_tail: str
    stderr_tail: str
    traceback: str | None
    # Path of the submission file the solution wrote, if any (inside work_dir, outside the sandbox view).
    submission_path: str | None
    backend: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExecutionResult:
        return cls(**data)


class SandboxBackend(Protocol):
    name: str
    # What a solution sees of the host (paths, layout): bumped when that changes, so outcomes
    # cached under an older view (tracebacks name paths) are not reused.
    revision: int

    def run(self, code: str, public_dir: Path, work_dir: Path, limits: SandboxLimits) -> ExecutionResult:
        """Run ``code`` with ``DATA_DIR=public_dir`` (read-only) and a fresh writable ``work_dir``.

        The solution writes its submission to ``SUBMISSION_PATH`` inside ``work_dir``.
        Must never raise for anything the solution does; infrastructure failures may raise.
        """
        ...
