"""The tmpfs accounting race behind a flaky quota test: a tmpfs file a process maps must count once even
when the mapping goes away (munmap, exit) in the middle of one memory sample."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from wmrl.sandbox import memory

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")
MB = 64
# Inside its own /dev/shm (a tmpfs of its mount namespace): write a file, map it and touch every page,
# then drop the mapping on SIGUSR1 (the file stays: still the execution's memory).
CHILD = f"""
import mmap, os, signal, sys, time
with open("/dev/shm/f.bin", "wb") as f:
    f.write(b"y" * ({MB} << 20))
f = open("/dev/shm/f.bin", "r+b")
m = mmap.mmap(f.fileno(), 0)
sum(m[i] for i in range(0, len(m), 4096))
signal.signal(signal.SIGUSR1, lambda *_: (m.close(), print("unmapped", flush=True)))
print(os.getpid(), flush=True)
while True:
    time.sleep(0.05)
"""


def test_a_mapping_dropped_during_a_sample_is_not_counted_twice(monkeypatch):
    proc = subprocess.Popen(["bwrap", "--dev-bind", "/", "/", "--tmpfs", "/dev/shm", "--die-with-parent",
                             sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    try:
        pid = int(proc.stdout.readline())
        before = memory.execution_memory([pid])
        assert MB <= before.tmpfs_mb < MB + 1 and before.total_mb < MB + 60  # the mapped file counts once
        real = memory.sandbox_tmpfs

        def unmapping_meanwhile(pids):  # the process drops its mapping in the middle of the sample
            found = real(pids)
            os.kill(pid, signal.SIGUSR1)
            assert proc.stdout.readline() == "unmapped\n"
            time.sleep(0.05)
            return found

        monkeypatch.setattr(memory, "sandbox_tmpfs", unmapping_meanwhile)
        during = memory.execution_memory([pid])
        assert during.tmpfs_mb == pytest.approx(before.tmpfs_mb)
        assert during.total_mb < MB + 60, during  # counted twice it would be over 2 x 64 MB
    finally:
        proc.kill()
        proc.wait()
