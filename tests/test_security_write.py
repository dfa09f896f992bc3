"""Security: hostile solutions try to write outside their work dir, and fail."""

from __future__ import annotations

from pathlib import Path

import test_security_common
from test_security_common import World, assert_contained, attack, limits, snapshot

world = test_security_common.world  # the shared fixture

WRITE = """
import os
def attempt(path):
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write("pwned")
        print("WROTE", path)
    except OSError as e:
        print("denied", path, type(e).__name__)
"""


def test_public_data_cannot_be_changed(world: World) -> None:
    before = snapshot(world.protected)
    code = (
        WRITE
        + """
attempt(os.path.join(DATA_DIR, "train.csv"))
attempt(os.path.join(DATA_DIR, "new.csv"))
try:
    os.chmod(os.path.join(DATA_DIR, "test.csv"), 0o777)
    os.remove(os.path.join(DATA_DIR, "test.csv"))
    print("WROTE removed")
except OSError as e:
    print("denied remove", type(e).__name__)
"""
    )
    result, grade = attack(world, code)
    assert "WROTE" not in result.stdout_tail
    assert_contained(world, before, result, grade)


def test_host_home_cannot_be_written(world: World) -> None:
    before = snapshot(world.protected)
    home = Path.home()
    target = home / f"pwned-{world.secret[-8:]}"
    code = (
        WRITE
        + f"""
attempt({str(target)!r})
attempt(os.path.expanduser("~/.bashrc"))  # the sandbox's own HOME: a tmpfs that vanishes
print("home is", os.path.expanduser("~"))
"""
    )
    result, grade = attack(world, code)
    if not home.is_relative_to("/tmp"):
        # (A HOME under /tmp, as in a test run with HOME=/tmp/x, is the sandbox's own tmpfs in there:
        # the write may succeed inside and must still not reach the host, as checked next.)
        assert f"denied {target}" in result.stdout_tail
    assert not target.exists()
    assert "home is /tmp" in result.stdout_tail
    assert_contained(world, before, result, grade)


def test_run_directory_cannot_be_written(world: World) -> None:
    before = snapshot(world.protected)
    code = (
        WRITE
        + f"""
attempt({str(world.run_dir / "anchors" / "results" / "req-1.json")!r})
attempt({str(world.run_dir / "anchors" / "results" / "req-2.json")!r})
attempt(os.path.join(os.getcwd(), "..", "..", "..", "runs", "run-1", "rollouts.jsonl"))
"""
    )
    result, grade = attack(world, code)
    # The host path lies under /tmp, which in the sandbox is its own tmpfs: a write there may
    # "succeed" but lands in memory that vanishes with the sandbox. The host must not change.
    assert not (world.run_dir / "anchors" / "results" / "req-2.json").exists()
    assert_contained(world, before, result, grade)


def test_other_executions_work_dirs_cannot_be_written(world: World) -> None:
    before = snapshot(world.protected)
    code = (
        WRITE
        + f"""
attempt({str(world.other_work / "submission.csv")!r})
attempt(os.path.join(os.getcwd(), "..", "other", "submission.csv"))
for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
    attempt(f"/proc/{{pid}}/root{world.other_work}/submission.csv")
"""
    )
    result, grade = attack(world, code)
    assert "denied /sandbox/work/../other/submission.csv" in result.stdout_tail
    assert_contained(world, before, result, grade)


def test_launcher_and_solution_files_are_read_only(world: World) -> None:
    before = snapshot(world.protected)
    code = (
        WRITE
        + """
attempt("/sandbox/in/launcher.py")
attempt("/sandbox/in/spec.json")
attempt("/usr/pwned")
"""
    )
    result, grade = attack(world, code)
    assert "WROTE" not in result.stdout_tail
    assert_contained(world, before, result, grade)


def test_shared_python_installation_cannot_be_changed(world: World) -> None:
    before = snapshot(world.protected)
    code = (
        WRITE
        + """
import sys, sklearn
attempt(sklearn.__file__)
attempt(os.path.join(sys.prefix, "lib", "pwned.py"))
attempt(os.path.join(sys.base_prefix, "lib", "pwned.py"))
"""
    )
    result, grade = attack(world, code)
    assert "WROTE" not in result.stdout_tail
    assert_contained(world, before, result, grade)


def test_another_executions_submission_grades_the_same_after_an_attack(world: World) -> None:
    from wmrl.grading.grader import grade_submission

    victim = world.other_work / "submission.csv"
    grade_before = grade_submission(world.task, victim)
    before = snapshot(world.protected)
    code = (
        WRITE
        + f"""
import os
found = []
for top, dirs, files in os.walk("/"):
    if top.startswith(("/proc", "/sys")):  # their links lead back to /; no run keeps files there
        dirs[:] = []
        continue
    found += [os.path.join(top, "submission.csv")] if "submission.csv" in files else []
for path in found + [{str(victim)!r}]:
    if path != SUBMISSION_PATH:
        attempt(path)
print("searched", len(found))
"""
    )
    # The search must finish to have tried every submission it could see. (It was a recursive glob
    # over / that never ended: the 5 s timeout cut it short and the test passed having tried nothing.)
    result, grade = attack(world, code, limits(timeout_s=120))
    assert result.status == "ok" and "searched" in result.stdout_tail, result.status
    after = grade_submission(world.task, victim)
    assert (after.valid, after.raw_score, after.position_score) == (
        grade_before.valid,
        grade_before.raw_score,
        grade_before.position_score,
    )
    assert_contained(world, before, result, grade)
