"""The ``apptainer`` backend: clusters (Slurm nodes, shared NFS, one GPU per worker).

The command (DESIGN §4)::

    apptainer exec --containall --cleanenv --no-home --net --network none
        --bind PUBLIC:/sandbox/data:ro --bind WORK:/sandbox/work
        --bind SCRATCH/in:/sandbox/in:ro --bind SCRATCH/out:/sandbox/out
        --workdir SCRATCH/tmp --bind SCRATCH/shm:/dev/shm
        [--nv] --pwd /sandbox/work --env K=V ... IMAGE python -s -B /sandbox/in/launcher.py ...

``--containall`` gives it its own pid and ipc namespaces, an empty /tmp and no host home;
``--net --network none`` a network namespace with loopback only.

Disk and memory as a whole: under ``--containall`` apptainer would put /tmp and /var/tmp in its
session tmpfs (sized by the site's ``sessiondir max size``, not by us) and mount a fresh tmpfs
of no size limit at /dev/shm. ``--workdir`` moves /tmp and /var/tmp to ``SCRATCH/tmp/{tmp,var_tmp}``
and the bind replaces /dev/shm with ``SCRATCH/shm``: every place the solution can write is then a
host directory on the node's scratch disk, which the supervisor's disk watchdog measures together
with the work dir against ``disk_quota_mb`` (the image itself is read-only). Apptainer has no time limit of
its own: the supervisor runs it in a new session and kills the whole process group (and every
descendant) on timeout. Bind variables a user may have exported (``APPTAINER_BIND`` and friends)
would silently add host paths to the sandbox: the command runs with a scrubbed environment.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from wmrl.sandbox.base import SandboxLimits
from wmrl.sandbox.config import SandboxConfig
from wmrl.sandbox.runspec import (
    BASE_PATH,
    SANDBOX_MOUNTS,
    Command,
    Execution,
    Mounts,
    SandboxError,
    SupervisedBackend,
    gpu_env,
    launcher_argv,
    mps_pipe,
    sandbox_env,
)

# Host variables apptainer reads on its own; none may reach it (prefixes and exact names).
SCRUBBED_PREFIXES = ("APPTAINER", "SINGULARITY")
# What apptainer itself needs from the host environment (never passed into the container).
HOST_KEEP = ("PATH", "HOME", "USER", "LOGNAME", "XDG_RUNTIME_DIR", "TMPDIR")
IMAGE_PATH = "/usr/local/bin:/usr/bin:/bin"


def host_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment apptainer runs with: a few host variables, no APPTAINER_*/SINGULARITY_*."""
    environ = dict(os.environ if environ is None else environ)
    env = {k: environ[k] for k in HOST_KEEP if k in environ}
    env.setdefault("PATH", BASE_PATH)
    return {k: v for k, v in env.items() if not k.startswith(SCRUBBED_PREFIXES)}


def build_argv(
    apptainer: str,
    image: str,
    python: str,
    public_dir: Path,
    work_dir: Path,
    scratch_in: Path,
    scratch_out: Path,
    scratch_tmp: Path,
    scratch_shm: Path,
    limits: SandboxLimits,
    extra_binds: list[str],
    env: dict[str, str],
) -> list[str]:
    m = SANDBOX_MOUNTS
    pipe = mps_pipe(env) if limits.gpus > 0 else None
    argv = [
        apptainer, "exec",
        # --containall is --contain --cleanenv --ipc --pid; an MPS client keeps the host's IPC namespace
        *(["--contain", "--pid"] if pipe else ["--containall"]), "--cleanenv", "--no-home",
        "--net", "--network", "none",
        "--bind", f"{public_dir}:{m.data}:ro",
        "--bind", f"{work_dir}:{m.work}",
        "--bind", f"{scratch_in}:{m.scratch_in}:ro",
        "--bind", f"{scratch_out}:{m.scratch_out}",
        # /tmp, /var/tmp and /dev/shm on the scratch disk, under the disk quota (module doc).
        "--workdir", str(scratch_tmp),
        "--bind", f"{scratch_shm}:/dev/shm",
    ]  # fmt: skip
    for spec in extra_binds:
        src, _, dest = spec.partition(":")
        argv += ["--bind", f"{src}:{dest or src}:ro"]
    if limits.gpus > 0:
        argv.append("--nv")
    if pipe:
        argv += ["--bind", f"{pipe}:{pipe}"]
    argv += ["--pwd", m.work]
    for key, value in env.items():
        argv += ["--env", f"{key}={value}"]
    argv += [image, *launcher_argv(python, m)]
    return argv


class ApptainerBackend(SupervisedBackend):
    name = "apptainer"
    revision = 1
    # Whether apptainer hands inherited descriptors through depends on its version and set-up: a
    # missing start signal means "unknown" here, never a sandbox failure.
    missing_start_is_failure = False

    def __init__(self, cfg: SandboxConfig) -> None:
        self.cfg = cfg
        self.python = cfg.python or "python"
        self.image = cfg.apptainer_image
        if not self.image:
            raise SandboxError("sandbox.apptainer_image is empty: build containers/sandbox.def")

    def _apptainer(self) -> str:
        found = shutil.which(self.cfg.apptainer_bin)
        if found is None:
            raise SandboxError(
                f"sandbox.apptainer_bin={self.cfg.apptainer_bin!r} is not on PATH; load the "
                "apptainer module (e.g. `module load apptainer`) or set the full path"
            )
        return found

    def _start(self, public_dir: Path) -> tuple[str, int | None]:
        if not Path(self.image).is_file():
            raise SandboxError(f"sandbox.apptainer_image={self.image!r} does not exist")
        return self._apptainer(), None

    def _command(self, program: str, execution: Execution, mounts: Mounts) -> Command:
        env = sandbox_env(mounts, self.cfg.threads, path=IMAGE_PATH)
        env.update(gpu_env(execution.limits))
        scratch = execution.scratch
        argv = build_argv(
            program, self.image, self.python, execution.public_dir, execution.work_dir, scratch.inp,
            scratch.out, scratch.tmp, scratch.shm, execution.limits, list(self.cfg.extra_binds), env,
        )  # fmt: skip
        return Command(argv, host_env(), writable=(execution.work_dir, scratch.out, scratch.tmp, scratch.shm))
