"""The ``subprocess`` backend: NO isolation. Opt-in only, for debugging on machines without bwrap.

The solution runs as this user, sees the whole filesystem and the network. Only the environment
is scrubbed, the rlimits apply and the wall-time / memory watchdog kills its session.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from wmrl.sandbox.base import ExecutionResult, SandboxLimits
from wmrl.sandbox.config import SandboxConfig
from wmrl.sandbox.limits import ProcSelector
from wmrl.sandbox.runspec import (
    BASE_PATH,
    Mounts,
    StartedPipe,
    fill_scratch,
    make_scratch,
    prepare_work_dir,
    resolve_dirs,
    sandbox_env,
    to_result,
)
from wmrl.sandbox.supervise import supervise

log = logging.getLogger(__name__)

WARNING = (
    "sandbox.backend=subprocess runs untrusted solutions WITHOUT ISOLATION: they can read the hidden "
    "answers, the network and your files. Use it only to debug; set sandbox.backend=bwrap "
    "(or apptainer on a cluster) for anything that trains or reports."
)


class SubprocessBackend:
    name = "subprocess"
    revision = 1

    def __init__(self, cfg: SandboxConfig | None = None) -> None:
        self.cfg = cfg or SandboxConfig(backend="subprocess")
        self.python = self.cfg.python or sys.executable
        log.warning(WARNING)

    def run(
        self, code: str, public_dir: Path, work_dir: Path, limits: SandboxLimits
    ) -> ExecutionResult:
        public_dir, work_dir = resolve_dirs(public_dir, work_dir)
        prepare_work_dir(work_dir, uid=None)
        pipe, scratch = StartedPipe(), make_scratch(self.cfg.scratch_dir)
        mounts = Mounts(
            data=str(public_dir),
            work=str(work_dir),
            scratch_in=str(scratch.inp),
            scratch_out=str(scratch.out),
            home=str(scratch.home),
            tmp=str(scratch.tmp),
        )
        try:
            fill_scratch(scratch, code, mounts, limits, None, pipe.write_fd)
            env = sandbox_env(
                mounts, self.cfg.threads, path=f"{Path(self.python).parent}:{BASE_PATH}"
            )
            argv = [
                self.python,
                "-s",
                "-B",
                f"{mounts.scratch_in}/launcher.py",
                f"{mounts.scratch_in}/spec.json",
            ]
            selector = lambda pid: ProcSelector(root=pid)
            outcome = supervise(
                argv, env, limits, selector, (pipe.write_fd,), cwd=work_dir,
                writable=(work_dir, scratch.out, scratch.home, scratch.tmp),
            )  # fmt: skip
            return to_result(outcome, self.name, work_dir, scratch, pipe.started())
        finally:
            pipe.close()
            scratch.remove()
