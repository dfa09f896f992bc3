"""What every backend does the same way: the run skeleton (``SupervisedBackend.run``), scratch files,
environment, and the result record.

Per execution the host creates a scratch directory outside the work dir::

    scratch/in/   launcher.py, solution.py, spec.json, passwd, group   (read-only in the sandbox)
    scratch/out/  traceback.txt                                       (writable by the solution)

The work dir holds only what the solution writes (its submission), so the grader sees nothing else.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from wmrl.sandbox.base import ExecutionResult, SandboxLimits
from wmrl.sandbox.config import SandboxConfig
from wmrl.sandbox.limits import ProcSelector
from wmrl.sandbox.supervise import Outcome, read_small, supervise

LAUNCHER = Path(__file__).with_name("launcher.py")
BASE_PATH = "/usr/local/bin:/usr/bin:/bin"
SUBMISSION_NAME = "submission.csv"
TRACEBACK_CAP = 64 * 1024
# Environment variables a solution may see; everything else of the host is scrubbed.
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")


class SandboxError(RuntimeError):
    """The sandbox itself could not run (bad image, missing binary, bad bind): not the solution's fault."""


class ExecutionStalled(SandboxError):
    """The machine held the execution back until its hard wall limit, before it had used its time: not
    the solution's fault, so no score (a worker retries it; an evaluation counts it failed)."""


@dataclass(frozen=True)
class Mounts:
    """Where the sandbox sees each host directory (identical paths for the subprocess backend)."""

    data: str
    work: str
    scratch_in: str
    scratch_out: str
    home: str = "/tmp"
    tmp: str = "/tmp"


# bwrap and apptainer: fixed paths, so solutions and prompts never see host paths.
SANDBOX_MOUNTS = Mounts(
    data="/sandbox/data", work="/sandbox/work", scratch_in="/sandbox/in", scratch_out="/sandbox/out"
)


@dataclass(frozen=True)
class Scratch:
    root: Path
    inp: Path
    out: Path
    home: Path  # HOME of the subprocess backend
    tmp: Path  # TMPDIR of the subprocess backend; apptainer's --workdir (its /tmp, /var/tmp)
    shm: Path  # apptainer's /dev/shm

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def make_scratch(base_dir: str = "") -> Scratch:
    root = Path(tempfile.mkdtemp(prefix="wmrl-sbx-", dir=base_dir or None))
    os.chmod(root, 0o755)
    scratch = Scratch(
        root=root, inp=root / "in", out=root / "out", home=root / "home", tmp=root / "tmp",
        shm=root / "shm",
    )  # fmt: skip
    for d in (scratch.inp, scratch.out, scratch.home, scratch.tmp, scratch.shm):
        d.mkdir(mode=0o755)
    return scratch


def fill_scratch(
    scratch: Scratch,
    code: str,
    mounts: Mounts,
    limits: SandboxLimits,
    uid: int | None = None,
    started_fd: int | None = None,
) -> None:
    """Write the launcher, the solution and the launcher's spec (paths as the sandbox sees them)."""
    inp = scratch.inp
    shutil.copyfile(LAUNCHER, inp / "launcher.py")
    (inp / "solution.py").write_text(code, encoding="utf-8")
    spec = {
        "code_path": f"{mounts.scratch_in}/solution.py",
        "data_dir": mounts.data,
        "work_dir": mounts.work,
        "submission_path": f"{mounts.work}/{SUBMISSION_NAME}",
        "traceback_path": f"{mounts.scratch_out}/traceback.txt",
        "memory_mb": limits.memory_mb,
        "max_procs": limits.max_procs,
        # No single file larger than the whole quota, whenever the disk watchdog looks.
        "max_file_mb": min(limits.max_file_mb, limits.disk_quota_mb),
        "started_fd": started_fd,
    }
    if uid is not None:
        spec["uid"] = spec["gid"] = uid
        # Libraries that look the user up (getpass, torch) need an entry for the run's uid.
        (inp / "passwd").write_text(f"sandbox:x:{uid}:{uid}:sandbox:{mounts.home}:/bin/sh\n")
        (inp / "group").write_text(f"sandbox:x:{uid}:\n")
        os.chown(scratch.out, uid, uid)
    (inp / "spec.json").write_text(json.dumps(spec))
    for f in inp.iterdir():
        f.chmod(0o644)


class StartedPipe:
    """The launcher writes one byte here once the sandbox is up, then closes it before the
    solution runs: a failure before that byte is the sandbox's, not the solution's."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()

    def started(self) -> bool:
        """Call after the execution ended."""
        if self.write_fd >= 0:
            os.close(self.write_fd)
            self.write_fd = -1
        os.set_blocking(self.read_fd, False)
        try:
            return os.read(self.read_fd, 1) == b"1"
        except BlockingIOError:
            return False

    def close(self) -> None:
        for fd in (self.read_fd, self.write_fd):
            if fd >= 0:
                os.close(fd)
        self.read_fd = self.write_fd = -1


def sandbox_env(
    mounts: Mounts, threads: int, path: str, extra: dict[str, str] | None = None
) -> dict[str, str]:
    """The complete environment of the solution (the host's is never inherited)."""
    env = {
        "PATH": path,
        "HOME": mounts.home,
        "TMPDIR": mounts.tmp,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "USER": "sandbox",
        "LOGNAME": "sandbox",
        "DATA_DIR": mounts.data,
        "SUBMISSION_PATH": f"{mounts.work}/{SUBMISSION_NAME}",
        "PYTHONUNBUFFERED": "1",  # output order survives a kill
        "PYTHONDONTWRITEBYTECODE": "1",
        "MPLBACKEND": "Agg",
    }
    env.update({name: str(threads) for name in THREAD_VARS})
    env.update(extra or {})
    return env


# A worker slot's GPU share (wmrl.execution.gpu_share sets them), passed on to a GPU execution.
GPU_SHARE_VARS = ("WMRL_GPU_FRACTION", "WMRL_GPU_MEMORY_MB", "TF_FORCE_GPU_ALLOW_GROWTH", "PYTORCH_CUDA_ALLOC_CONF",
                  "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")


def gpu_env(limits: SandboxLimits) -> dict[str, str]:
    """CUDA_VISIBLE_DEVICES inside: hidden without GPUs, the worker's assignment with them (and its
    share of the GPU when several executions share it: launch.executions_per_gpu)."""
    if limits.gpus <= 0:
        return {"CUDA_VISIBLE_DEVICES": ""}
    env = {name: os.environ[name] for name in ("CUDA_VISIBLE_DEVICES", *GPU_SHARE_VARS) if os.environ.get(name)}
    return env


def mps_pipe(env: dict[str, str]) -> str | None:
    """The MPS pipe directory an execution with a GPU share connects through (``launch.mps``), else None.
    Its sandbox then shares the host's IPC namespace and binds the directory: MPS clients reach their
    server through it, as NVIDIA's container guidance has them (docs/sandbox.md, "Sharing a GPU")."""
    return env.get("CUDA_MPS_PIPE_DIRECTORY") or None


def resolve_dirs(public_dir: Path, work_dir: Path) -> tuple[Path, Path]:
    """Absolute data and work directories of a run; the data must exist (a setup fault otherwise)."""
    public_dir, work_dir = Path(public_dir).resolve(), Path(work_dir).resolve()
    if not public_dir.is_dir():
        raise SandboxError(f"public data directory {public_dir} does not exist")
    return public_dir, work_dir


def prepare_work_dir(work_dir: Path, uid: int | None) -> None:
    """Make the fresh work dir writable by the execution (its own uid when bwrap runs as root)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    if uid is None:
        return
    for dirpath, dirnames, filenames in os.walk(work_dir):
        for name in [dirpath, *(os.path.join(dirpath, n) for n in dirnames + filenames)]:
            os.lchown(name, uid, uid)
    # Traversable by others: bwrap's own root, with its capabilities dropped, must chdir into it.
    os.chmod(work_dir, os.stat(work_dir).st_mode | 0o711)


def submission_file(work_dir: Path) -> tuple[str | None, str | None]:
    """(path, None) for a regular submission file; (None, why) when absent or unsafe to read.

    A solution may plant ``submission.csv`` as a symlink (or hard link) to a file it cannot read,
    hoping the grader, outside the sandbox, will read it: such a file is never handed on.
    """
    path = work_dir / SUBMISSION_NAME
    try:
        st = path.lstat()
    except FileNotFoundError:
        return None, "missing"
    if path.is_symlink():
        return None, "submission is a symlink"
    if not path.is_file():
        return None, "submission is not a regular file"
    if st.st_nlink != 1:
        return None, "submission is a hard link"
    return str(path), None


def to_result(
    outcome: Outcome, backend: str, work_dir: Path, scratch: Scratch, started: bool | None
) -> ExecutionResult:
    """``started``: the launcher signalled that the sandbox came up (None: cannot tell)."""
    traceback = read_small(scratch.out / "traceback.txt", TRACEBACK_CAP) or None
    code = outcome.exit_code
    if outcome.reason in ("timeout", "memory", "disk_quota"):
        status = outcome.reason
    elif code == 0:
        status = "ok"
    elif traceback is not None or (code is not None and 0 < code < 128):
        status = "error"
    else:  # killed by a signal (kernel OOM killer, a SIGKILL it sent itself, ...)
        status = "killed"
    if outcome.reason == "stalled":
        raise ExecutionStalled(f"{backend} execution stalled: {outcome.detail}; a quieter machine, fewer "
                               "workers per core or a larger sandbox.max_wall_factor lets it run")
    if started is False and outcome.reason == "exited" and code != 0:
        raise SandboxError(
            f"{backend} sandbox failed to start (exit {code}): {outcome.stderr.text()[-2000:]}"
        )
    sub, why = submission_file(work_dir)
    extra: dict = dict(outcome.extra)
    if outcome.reason != "exited":
        extra["kill_reason"] = outcome.reason
    if outcome.detail:
        extra["limit_detail"] = outcome.detail
    if why and why != "missing":
        extra["submission_rejected"] = why
    if outcome.survivors:
        extra["survivors"] = outcome.survivors
    if outcome.held_back_seconds >= 0.1:
        extra["held_back_seconds"] = round(outcome.held_back_seconds, 1)
    return ExecutionResult(
        status=status,
        exit_code=code,
        wall_seconds=outcome.wall_seconds,
        cpu_seconds=outcome.cpu_seconds,
        peak_memory_mb=outcome.peak_memory_mb,
        stdout_tail=outcome.stdout.text(),
        stderr_tail=outcome.stderr.text(),
        traceback=traceback,
        submission_path=sub,
        backend=backend,
        extra=extra,
    )


def launcher_argv(python: str, mounts: Mounts) -> list[str]:
    """The interpreter running the launcher on its spec (no user site, no bytecode written)."""
    return [python, "-s", "-B", f"{mounts.scratch_in}/launcher.py", f"{mounts.scratch_in}/spec.json"]


def processes_of(uid: int | None) -> Callable[[int], ProcSelector]:
    """Which host processes are an execution's, given its top process: every process of its own uid when
    it has one (bwrap started by root), else every descendant of the top process."""
    if uid is not None:
        return lambda pid: ProcSelector(uid=uid)
    return lambda pid: ProcSelector(root=pid)


@dataclass(frozen=True)
class Execution:
    """One execution's host side, as the run skeleton prepared it for a backend's command."""

    public_dir: Path  # absolute, existing; read-only inside
    work_dir: Path  # absolute, ready; writable inside
    scratch: Scratch  # filled with the launcher, the solution and its spec
    limits: SandboxLimits
    uid: int | None  # the execution's own uid (bwrap started by root); None: it runs as this user


@dataclass(frozen=True)
class Command:
    """What the supervisor starts for one execution."""

    argv: list[str]
    host_env: dict[str, str]  # the environment the command itself starts with
    writable: tuple[Path, ...]  # every host directory the execution can write: the disk quota's
    cwd: Path | None = None


class SupervisedBackend:
    """The run every backend shares (``SandboxBackend.run``): resolve the directories, refuse what cannot
    start, prepare the work dir and a scratch directory holding the launcher's files, run the backend's
    command under :func:`~wmrl.sandbox.supervise.supervise`, turn what it saw into the result record and
    remove the scratch. A backend says only what differs: :meth:`_start`, :meth:`_command` and, where the
    sandbox shows the host's own paths, :meth:`_mounts`."""

    name: str
    revision: int
    cfg: SandboxConfig
    # A sandbox that exits with an error and never sent the launcher's start signal failed to start
    # (a SandboxError). False where the signal may not come through at all: its absence means "unknown".
    missing_start_is_failure: ClassVar[bool] = True

    def run(self, code: str, public_dir: Path, work_dir: Path, limits: SandboxLimits) -> ExecutionResult:
        public_dir, work_dir = resolve_dirs(public_dir, work_dir)
        program, uid = self._start(public_dir)
        prepare_work_dir(work_dir, uid)
        pipe, scratch = StartedPipe(), make_scratch(self.cfg.scratch_dir)
        try:
            execution = Execution(public_dir, work_dir, scratch, limits, uid)
            mounts = self._mounts(execution)
            fill_scratch(scratch, code, mounts, limits, uid, pipe.write_fd)
            command = self._command(program, execution, mounts)
            outcome = supervise(
                command.argv, command.host_env, limits, processes_of(uid), (pipe.write_fd,),
                cwd=command.cwd, writable=command.writable,
            )  # fmt: skip
            started = pipe.started() if self.missing_start_is_failure else (pipe.started() or None)
            return to_result(outcome, self.name, work_dir, scratch, started)
        finally:
            pipe.close()
            scratch.remove()

    def _start(self, public_dir: Path) -> tuple[str, int | None]:
        """Refuse a run that cannot start, before anything is created; returns the program that starts
        the sandbox and the execution's own uid (None: it runs as this user)."""
        raise NotImplementedError

    def _mounts(self, execution: Execution) -> Mounts:
        """Where the sandbox sees the host directories: fixed paths, unless a backend shows the host's."""
        return SANDBOX_MOUNTS

    def _command(self, program: str, execution: Execution, mounts: Mounts) -> Command:
        """The command line that runs the launcher in this backend's sandbox."""
        raise NotImplementedError
