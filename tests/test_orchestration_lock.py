"""One coordinator per run: the run lock refuses a second holder and is broken only when stale."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from wmrl.storage.lock import LockOwner, RunLock, RunLockHeld

HOLDER = (
    "import sys, time, dataclasses\n"
    "from wmrl.storage.lock import RunLock, LockOwner\n"
    "owner = LockOwner.current()\n"
    "if sys.argv[2] != '-': owner = dataclasses.replace(owner, host=sys.argv[2])\n"
    "lock = RunLock(sys.argv[1], stale_s=float(sys.argv[3]), heartbeat_s=0.1, owner=owner)\n"
    "lock.acquire(); print('held', flush=True); time.sleep(600)\n"
)


def start_holder(path: Path, host: str = "-", stale_s: float = 60.0) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), host, str(stale_s)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def kill9(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def test_second_coordinator_refuses_naming_the_holder(tmp_path: Path) -> None:
    path = tmp_path / "RUN_LOCK"
    holder = start_holder(path)
    try:
        with pytest.raises(RunLockHeld, match=rf"pid {holder.pid} on host {os.uname().nodename}"):
            RunLock(path, stale_s=60).acquire()
    finally:
        kill9(holder)


def test_lock_of_a_killed_holder_on_this_host_is_taken_over(tmp_path: Path) -> None:
    path = tmp_path / "RUN_LOCK"
    kill9(start_holder(path))
    lock = RunLock(path, stale_s=60)
    lock.acquire()
    assert lock.holds()
    lock.release()
    assert not path.exists()


def test_remote_holder_lock_is_taken_over_only_once_stale(tmp_path: Path) -> None:
    path = tmp_path / "RUN_LOCK"
    stale_s = 3.0
    holder = start_holder(path, host="node-b", stale_s=stale_s)
    time.sleep(stale_s + 0.5)  # longer than stale_s, but the live holder keeps renewing it
    with pytest.raises(RunLockHeld, match="node-b"):
        RunLock(path, stale_s=stale_s).acquire()
    kill9(holder)
    killed_at = time.monotonic()
    # the holder's last heartbeat: the lock is stale stale_s after it (a heartbeat late under load only
    # brings the takeover nearer; measured from the kill, a fixed bound would flake)
    age_at_kill = time.time() - path.stat().st_mtime
    with pytest.raises(RunLockHeld):
        RunLock(path, stale_s=stale_s).acquire()  # not stale yet: a remote pid cannot be checked
    while True:
        try:
            RunLock(path, stale_s=stale_s).acquire()
            break
        except RunLockHeld:
            assert time.monotonic() - killed_at < 30, "stale lock was never taken over"
            time.sleep(0.1)
    assert time.monotonic() - killed_at >= stale_s - age_at_kill - 0.1


def test_a_heartbeat_slower_than_half_the_stale_time_is_refused(tmp_path: Path) -> None:
    # renewed every 10 s but stale after 5 s: a contender 6 s late would break a live holder's lock
    with pytest.raises(ValueError, match=r"heartbeat_s=10.0 must be in \(0, stale_s / 2 = 2.5\]"):
        RunLock(tmp_path / "RUN_LOCK", stale_s=5.0, heartbeat_s=10.0)
    assert RunLock(tmp_path / "RUN_LOCK", stale_s=5.0).heartbeat_s == 1.25  # the default follows stale_s
    assert RunLock(tmp_path / "RUN_LOCK").heartbeat_s == 10.0


def test_requeued_slurm_job_takes_over_its_own_fresh_lock(tmp_path: Path) -> None:
    path = tmp_path / "RUN_LOCK"
    first = RunLock(path, heartbeat_s=0.1,
                    owner=replace(LockOwner.current(), host="node-a", slurm_job_id="42", restart_count=0))
    first.acquire()
    second = RunLock(path, owner=replace(LockOwner.current(), host="node-b", slurm_job_id="42", restart_count=1))
    second.acquire()
    assert second.holds() and not first.holds()
    deadline = time.monotonic() + 5
    while first.lost is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert first.lost is not None and "taken over" in first.lost
    first.release()  # must not remove the new holder's lock
    assert second.holds()
    second.release()


def test_other_slurm_job_does_not_take_over_a_fresh_lock(tmp_path: Path) -> None:
    path = tmp_path / "RUN_LOCK"
    first = RunLock(path, owner=replace(LockOwner.current(), host="node-a", slurm_job_id="42"))
    first.acquire()
    with pytest.raises(RunLockHeld, match="Slurm job 42"):
        RunLock(path, owner=replace(LockOwner.current(), host="node-b", slurm_job_id="43",
                                    restart_count=1)).acquire()
    first.release()


CONTENDER = (
    "import sys, dataclasses\n"
    "from wmrl.storage.lock import RunLock, LockOwner, RunLockHeld\n"
    # stale after 60 s, renewed every 10 s (the config's rule: at most half): a winner's fresh lock is never
    # stale to a contender that a loaded machine ran seconds late (stale_s=5 with the 10 s heartbeat let
    # one break the winner's lock: two winners)
    "lock = RunLock(sys.argv[1], stale_s=60.0, owner=dataclasses.replace(LockOwner.current(), host='node-x'))\n"
    "sys.stdin.readline()\n"
    "try:\n"
    "    lock.acquire(); print('won', lock.owner.token, flush=True)\n"
    "except RunLockHeld:\n"
    "    print('refused', flush=True)\n"
    "sys.stdin.readline()\n"
)


def test_contenders_for_a_stale_lock_produce_exactly_one_winner(tmp_path: Path) -> None:
    path = tmp_path / "RUN_LOCK"
    stale = RunLock(path, owner=replace(LockOwner.current(), host="node-gone"))
    stale.acquire()
    stale._stop.set()  # the holder "dies": no more heartbeats
    old = time.time() - 3600
    os.utime(path, (old, old))
    procs = [subprocess.Popen([sys.executable, "-c", CONTENDER, str(path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True) for _ in range(6)]
    time.sleep(1.5)  # let every contender finish importing
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    answers = []
    for proc in procs:
        assert proc.stdout is not None
        answers.append(proc.stdout.readline().split())
    for proc in procs:
        proc.communicate("done\n", timeout=30)
    winners = [a for a in answers if a[0] == "won"]
    assert len(winners) == 1
    assert RunLock(path).read_holder()[0].token == winners[0][1]  # type: ignore[index]
