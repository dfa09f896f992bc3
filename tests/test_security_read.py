"""Security: hostile solutions try to read the hidden answers, and fail."""

from __future__ import annotations

import test_security_common
from test_security_common import World, assert_contained, attack, limits, snapshot

world = test_security_common.world  # the shared fixture

# Every attack below prints whatever it managed to read and copies it into SUBMISSION_PATH, as a
# reward-hacking policy would; the assertions then look for the secret token of answers.csv.


def test_reading_answers_by_guessed_absolute_path_fails(world: World) -> None:
    before = snapshot(world.protected)
    code = f"""
import os, shutil
for guess in [{str(world.answers)!r}, os.path.join(DATA_DIR, "..", "private", "answers.csv"),
              "/private/answers.csv", "/sandbox/private/answers.csv"]:
    try:
        print(open(guess).read())
        shutil.copy(guess, SUBMISSION_PATH)
    except OSError as e:
        print("denied", guess, type(e).__name__)
"""
    result, grade = attack(world, code)
    assert result.stdout_tail.count("denied") == 4
    assert_contained(world, before, result, grade)


def test_walking_the_whole_filesystem_finds_no_private_file(world: World) -> None:
    before = snapshot(world.protected)
    code = """
import os
hits = []
for top, dirs, files in os.walk("/"):
    if top.startswith(("/proc", "/sys", "/usr")):
        dirs[:] = []
        continue
    for name in files:
        if name in ("answers.csv", "leaderboard.csv", "task.json"):
            hits.append(os.path.join(top, name))
print("hits", hits)
for hit in hits:
    print(open(hit).read())
"""
    # The walk lists ~130k entries (the bound venv and stdlib): about 2 s quiet, 4 s on a cold cache
    # beside a loaded CI, so the usual 5 s budget made a slow machine fail the test, not the sandbox.
    # It must finish: a walk cut short by its timeout proves nothing about what it did not reach.
    result, grade = attack(world, code, limits(timeout_s=120))
    assert result.status == "ok", (result.status, result.stderr_tail)
    assert "hits []" in result.stdout_tail
    assert_contained(world, before, result, grade)


def test_proc_of_other_processes_does_not_reach_the_host(world: World) -> None:
    before = snapshot(world.protected)
    code = f"""
import os
pids = [p for p in os.listdir("/proc") if p.isdigit()]
print("pids", len(pids))
for pid in pids:
    for what in ("root" + {str(world.answers)!r}, "cwd/../private/answers.csv", "environ"):
        try:
            print(open(f"/proc/{{pid}}/{{what}}", "rb").read()[:2000])
        except OSError as e:
            print("denied", pid, what, type(e).__name__)
ppid = os.getppid()
try:
    print(os.listdir(f"/proc/{{ppid}}/root"))
except OSError as e:
    print("denied ppid root", type(e).__name__)
"""
    result, grade = attack(world, code)
    # Only the sandbox's own pid namespace is visible: its init and the solution (+ this /proc walk).
    npids = int(result.stdout_tail.split("pids ", 1)[1].split()[0])
    assert npids <= 3
    assert_contained(world, before, result, grade)


def test_host_paths_guessed_from_proc_mounts_are_not_reachable(world: World) -> None:
    before = snapshot(world.protected)
    code = """
import os
guesses = set()
for line in open("/proc/self/mountinfo"):
    fields = line.split()
    root, mountpoint = fields[3], fields[4]
    if mountpoint == "/sandbox/data":
        guesses.add(os.path.join(os.path.dirname(root), "private", "answers.csv"))
        guesses.add(os.path.join(root, "..", "private", "answers.csv"))
print("guesses", sorted(guesses))
for g in sorted(guesses):
    for path in (g, "/proc/1/root" + g):
        try:
            print(open(path).read())
        except OSError as e:
            print("denied", path, type(e).__name__)
"""
    result, grade = attack(world, code)
    assert "guesses []" not in result.stdout_tail  # the attack had something to try
    assert_contained(world, before, result, grade)


def test_symlink_planted_as_submission_is_not_followed_by_the_grader(world: World) -> None:
    before = snapshot(world.protected)
    code = f"""
import os
os.symlink({str(world.answers)!r}, SUBMISSION_PATH)
"""
    result, grade = attack(world, code)
    assert (world.work_dir / "submission.csv").is_symlink()  # the plant itself succeeded
    assert result.submission_path is None
    assert not grade.valid and grade.position_score == 0.0
    assert_contained(world, before, result, grade)


def test_relative_symlink_to_private_side_is_not_followed_either(world: World) -> None:
    before = snapshot(world.protected)
    # From the host's view of the work dir (exec/attempts/<id>/), this points at the real answers.
    rel = "../../../tasks/tiny/private/answers.csv"
    code = f"""
import os
os.symlink({rel!r}, SUBMISSION_PATH)
try:
    print(open(SUBMISSION_PATH).read())
except OSError as e:
    print("denied", type(e).__name__)
"""
    result, grade = attack(world, code)
    assert (world.work_dir / rel).resolve() == world.answers.resolve()
    assert "denied" in result.stdout_tail
    assert result.extra.get("submission_rejected") == "submission is a symlink"
    assert not grade.valid
    assert_contained(world, before, result, grade)


def test_environment_holds_no_host_variables(world: World) -> None:
    before = snapshot(world.protected)
    code = """
import os
print(sorted(os.environ.items()))
"""
    result, grade = attack(world, code)
    env = dict(eval(result.stdout_tail))  # our own repr output
    # The one path variable: where libpython lies when the installation moved to /opt/python.
    assert env.get("LD_LIBRARY_PATH", "/opt/python/lib") == "/opt/python/lib"
    assert set(env) <= {
        "PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "USER", "LOGNAME", "DATA_DIR", "SUBMISSION_PATH",
        "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "MPLBACKEND", "CUDA_VISIBLE_DEVICES", "PWD",
        "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
        "LD_LIBRARY_PATH",
    }  # fmt: skip
    assert_contained(world, before, result, grade)
