"""An execution does not outlive the process supervising it.

A worker stopped by Slurm raises ``Preempted`` into the running sandbox call; the solution, in its own
session, used to run on orphaned after the worker had left (until the job's end, or forever outside
Slurm). Here a real process supervises a real sandbox and is stopped the same way.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

BACKENDS = [
    # bwrap is the local default; skipped only where bubblewrap cannot exist (tests/test_sandbox_bwrap.py)
    pytest.param("bwrap", marks=pytest.mark.skipif(shutil.which("bwrap") is None, reason="no bubblewrap")),
    "subprocess",
]

SUPERVISOR = """
import signal, sys
from pathlib import Path
from wmrl.sandbox import SandboxConfig, SandboxLimits, make_backend

class Stopped(BaseException):
    pass

def stop(signum, frame):
    raise Stopped()

signal.signal(signal.SIGTERM, stop)
tmp = Path(sys.argv[2])
(tmp / "public").mkdir()
# PR_SET_NAME (15): a name to find the process by from outside (bwrap's /proc/self/comm is read-only)
code = "import ctypes, time\\nctypes.CDLL(None).prctl(15, %r, 0, 0, 0)\\ntime.sleep(120)\\n" % sys.argv[3].encode()
try:
    make_backend(SandboxConfig(backend=sys.argv[1])).run(code, tmp / "public", tmp / "work", SandboxLimits(timeout_s=300))
except Stopped:
    sys.exit(3)
"""


def processes_named(name: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == name:
                found.append(int(pid))
        except OSError:
            pass
    return found


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_stopped_supervisor_takes_its_execution_with_it(backend: str, tmp_path: Path) -> None:
    marker = f"wmrlorph{os.getpid() % 10000}"  # a comm holds 15 characters
    supervisor = subprocess.Popen([sys.executable, "-c", SUPERVISOR, backend, str(tmp_path), marker])
    deadline = time.monotonic() + 60
    while not processes_named(marker):
        assert time.monotonic() < deadline and supervisor.poll() is None, "the solution never started"
        time.sleep(0.1)
    supervisor.send_signal(signal.SIGTERM)
    assert supervisor.wait(timeout=30) == 3
    assert processes_named(marker) == []
