"""Config section ``sandbox``: how anchor solutions are executed."""

from __future__ import annotations

from dataclasses import dataclass, field

from wmrl.config_checks import ConfigError, check_choice, check_range
from wmrl.sandbox.base import SandboxLimits

BACKENDS = ("bwrap", "apptainer", "subprocess")


@dataclass
class SandboxConfig:
    backend: str = "bwrap"
    timeout_s: float = 1200.0  # Appendix D execution budget
    # Per-process address-space limit, and the limit on the execution's memory as a whole: the PSS of
    # all its processes plus its files in tmpfs (/tmp, /dev/shm under bwrap).
    memory_mb: int = 8192
    # Processes + threads the solution may hold at once (a fork bomb stops here).
    max_procs: int = 256
    # Bytes of stdout / stderr kept (the tail); the rest is read and dropped.
    max_output_bytes: int = 1 << 20
    # Largest single file the solution may write (RLIMIT_FSIZE); guards the shared disk.
    max_file_mb: int = 4096
    # Disk quota of one execution: the bytes of everything it can write (work dir, scratch, and
    # for apptainer its /tmp, /var/tmp, /dev/shm) together; and how many files it may hold.
    disk_quota_mb: int = 16384
    max_files: int = 100_000
    gpus: int = 0
    # Threads for OpenMP / BLAS inside the sandbox (OMP_NUM_THREADS and friends).
    threads: int = 1
    # Interpreter that runs the solution; "" = this process's interpreter (bwrap, subprocess)
    # or "python" on the image's PATH (apptainer).
    python: str = ""
    # Apptainer: the .sif image and the executable to call.
    apptainer_image: str = ""
    apptainer_bin: str = "apptainer"
    # Extra read-only binds "SRC" or "SRC:DEST" (e.g. a shared model cache); never the private side.
    extra_binds: list[str] = field(default_factory=list)
    # Where per-run scratch (solution file, launcher, traceback) is created; "" = system temp dir.
    scratch_dir: str = ""

    def validate(self, prefix: str = "sandbox") -> None:
        check_choice(f"{prefix}.backend", self.backend, BACKENDS)
        check_range(f"{prefix}.timeout_s", self.timeout_s, 0.0, low_open=True)
        check_range(f"{prefix}.memory_mb", self.memory_mb, 64)
        check_range(f"{prefix}.max_procs", self.max_procs, 4)
        check_range(f"{prefix}.max_output_bytes", self.max_output_bytes, 1024)
        check_range(f"{prefix}.max_file_mb", self.max_file_mb, 1)
        check_range(f"{prefix}.disk_quota_mb", self.disk_quota_mb, 1)
        check_range(f"{prefix}.max_files", self.max_files, 16)
        check_range(f"{prefix}.gpus", self.gpus, 0)
        check_range(f"{prefix}.threads", self.threads, 1)
        if self.backend == "apptainer" and not self.apptainer_image:
            raise ConfigError(
                f"{prefix}.apptainer_image is empty; the apptainer backend needs the path of the "
                "sandbox image (.sif), built from containers/sandbox.def (see containers/README.md)"
            )
        for i, spec in enumerate(self.extra_binds):
            if not spec or not str(spec).startswith("/") or str(spec).count(":") > 1:
                raise ConfigError(
                    f"{prefix}.extra_binds[{i}]={spec!r} is not allowed; use an absolute 'SRC' or 'SRC:DEST'"
                )


def limits_from_config(cfg: SandboxConfig, timeout_s: float | None = None) -> SandboxLimits:
    """The per-execution limits a backend enforces, from the ``sandbox`` section.

    ``timeout_s`` overrides the configured budget (e.g. a task with its own time limit).
    """
    return SandboxLimits(
        timeout_s=float(cfg.timeout_s if timeout_s is None else timeout_s),
        memory_mb=int(cfg.memory_mb),
        max_procs=int(cfg.max_procs),
        max_output_bytes=int(cfg.max_output_bytes),
        gpus=int(cfg.gpus),
        max_file_mb=int(cfg.max_file_mb),
        disk_quota_mb=int(cfg.disk_quota_mb),
        max_files=int(cfg.max_files),
    )
