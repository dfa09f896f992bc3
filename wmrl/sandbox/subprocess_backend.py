"""The ``subprocess`` backend: NO isolation. Opt-in only, for debugging on machines without bwrap.

The solution runs as this user, sees the whole filesystem and the network. Only the environment
is scrubbed, the rlimits apply and the wall-time / memory watchdog kills its session.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from wmrl.sandbox.config import SandboxConfig
from wmrl.sandbox.runspec import (
    BASE_PATH,
    Command,
    Execution,
    Mounts,
    SupervisedBackend,
    launcher_argv,
    sandbox_env,
)

log = logging.getLogger(__name__)

WARNING = (
    "sandbox.backend=subprocess runs untrusted solutions WITHOUT ISOLATION: they can read the hidden "
    "answers, the network and your files. Use it only to debug; set sandbox.backend=bwrap "
    "(or apptainer on a cluster) for anything that trains or reports."
)


class SubprocessBackend(SupervisedBackend):
    name = "subprocess"
    revision = 1

    def __init__(self, cfg: SandboxConfig | None = None) -> None:
        self.cfg = cfg or SandboxConfig(backend="subprocess")
        self.python = self.cfg.python or sys.executable
        log.warning(WARNING)

    def _start(self, public_dir: Path) -> tuple[str, int | None]:
        return self.python, None

    def _mounts(self, execution: Execution) -> Mounts:
        scratch = execution.scratch  # no sandbox view: the solution sees the host's paths
        return Mounts(
            data=str(execution.public_dir), work=str(execution.work_dir), scratch_in=str(scratch.inp),
            scratch_out=str(scratch.out), home=str(scratch.home), tmp=str(scratch.tmp),
        )  # fmt: skip

    def _command(self, program: str, execution: Execution, mounts: Mounts) -> Command:
        env = sandbox_env(mounts, self.cfg.threads, path=f"{Path(program).parent}:{BASE_PATH}")
        scratch = execution.scratch
        return Command(
            launcher_argv(program, mounts), env, cwd=execution.work_dir,  # no sandbox: env is the solution's
            writable=(execution.work_dir, scratch.out, scratch.home, scratch.tmp),
        )  # fmt: skip
