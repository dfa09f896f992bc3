"""Config section ``sandbox``: how anchor solutions are executed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from wmrl.config_checks import ConfigError, Section, checked_by, choice, each, in_range
from wmrl.sandbox.base import SandboxLimits

BACKENDS = ("bwrap", "apptainer", "subprocess")


def _check_bind(key: str, spec: str) -> None:
    if not spec or not str(spec).startswith("/") or str(spec).count(":") > 1:
        raise ConfigError(f"{key}={spec!r} is not allowed; use an absolute 'SRC' or 'SRC:DEST'")


@dataclass
class SandboxConfig(Section):
    KEY: ClassVar[str] = "sandbox"
    backend: str = field(default="bwrap", metadata=choice(BACKENDS))
    # Appendix D execution budget, in the solution's own wall seconds: time it spent runnable but waiting
    # for a CPU (a loaded or oversubscribed node, a sweep at low priority) is not charged to it.
    timeout_s: float = field(default=1200.0, metadata=in_range(0.0, low_open=True))
    # The hard wall-clock limit, as a multiple of timeout_s, however long the machine held it back;
    # stopped there it is an infrastructure failure (retried by the workers), not a timeout scored 0.
    max_wall_factor: float = field(default=4.0, metadata=in_range(1.0))
    # Per-process address-space limit, and the limit on the execution's memory as a whole: the PSS of
    # all its processes plus its files in tmpfs (/tmp, /dev/shm under bwrap).
    memory_mb: int = field(default=8192, metadata=in_range(64))
    # Processes + threads the solution may hold at once (a fork bomb stops here).
    max_procs: int = field(default=256, metadata=in_range(4))
    # Bytes of stdout / stderr kept (the tail); the rest is read and dropped.
    max_output_bytes: int = field(default=1 << 20, metadata=in_range(1024))
    # Largest single file the solution may write (RLIMIT_FSIZE); guards the shared disk.
    max_file_mb: int = field(default=4096, metadata=in_range(1))
    # Disk quota of one execution: the bytes of everything it can write (work dir, scratch, and
    # for apptainer its /tmp, /var/tmp, /dev/shm) together; and how many files it may hold.
    disk_quota_mb: int = field(default=16384, metadata=in_range(1))
    max_files: int = field(default=100_000, metadata=in_range(16))
    gpus: int = field(default=0, metadata=in_range(0))
    # Threads for OpenMP / BLAS inside the sandbox (OMP_NUM_THREADS and friends).
    threads: int = field(default=1, metadata=in_range(1))
    # Interpreter that runs the solution; "" = this process's interpreter (bwrap, subprocess)
    # or "python" on the image's PATH (apptainer).
    python: str = ""
    # Apptainer: the .sif image and the executable to call.
    apptainer_image: str = ""
    apptainer_bin: str = "apptainer"
    # Extra read-only binds "SRC" or "SRC:DEST" (e.g. a shared model cache); never the private side.
    extra_binds: list[str] = field(default_factory=list, metadata=each(checked_by(_check_bind)))
    # Where per-run scratch (solution file, launcher, traceback) is created; "" = system temp dir.
    scratch_dir: str = ""

    def check_together(self, prefix: str) -> None:
        if self.backend == "apptainer" and not self.apptainer_image:
            raise ConfigError(
                f"{prefix}.apptainer_image is empty; the apptainer backend needs the path of the "
                "sandbox image (.sif), built from containers/sandbox.def (see containers/README.md)"
            )


def limits_from_config(cfg: SandboxConfig, timeout_s: float | None = None) -> SandboxLimits:
    """The per-execution limits a backend enforces, from the ``sandbox`` section.

    ``timeout_s`` overrides the configured budget (e.g. a task with its own time limit).
    """
    return SandboxLimits(
        timeout_s=float(cfg.timeout_s if timeout_s is None else timeout_s),
        max_wall_factor=float(cfg.max_wall_factor),
        memory_mb=int(cfg.memory_mb),
        max_procs=int(cfg.max_procs),
        max_output_bytes=int(cfg.max_output_bytes),
        gpus=int(cfg.gpus),
        max_file_mb=int(cfg.max_file_mb),
        disk_quota_mb=int(cfg.disk_quota_mb),
        max_files=int(cfg.max_files),
        cpus=int(cfg.threads),
    )
