"""In-sandbox bootstrap: limit, drop privileges, run the solution, record its traceback.

Runs INSIDE the sandbox with the sandbox's interpreter, so it imports nothing but the standard
library (the Apptainer image does not contain wmrl). It is copied next to the solution and called as::

    python launcher.py SPEC.json

SPEC (written by the host) holds: ``code_path``, ``data_dir``, ``submission_path``, ``work_dir``,
``traceback_path``, ``memory_mb``, ``max_procs``, ``max_file_mb`` and optionally ``uid``/``gid``.
"""

import json
import linecache
import os
import resource
import sys
import traceback

SOLUTION_NAME = "solution.py"  # the filename tracebacks show; the agent wrote "solution.py"


def _set_limit(which: int, value: int) -> None:
    # Never raise a hard limit (we may not be allowed to); only lower both to ``value``.
    _soft, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(which, (value, value))


def apply_limits(spec: dict) -> None:
    mb = 1024 * 1024
    if spec.get("memory_mb"):
        _set_limit(resource.RLIMIT_AS, int(spec["memory_mb"]) * mb)
    if spec.get("max_procs"):
        # Counted per real uid, and ignored for root: hence the privilege drop below.
        _set_limit(resource.RLIMIT_NPROC, int(spec["max_procs"]))
    if spec.get("max_file_mb"):
        _set_limit(resource.RLIMIT_FSIZE, int(spec["max_file_mb"]) * mb)
    _set_limit(resource.RLIMIT_CORE, 0)


def drop_privileges(spec: dict) -> None:
    """As root (bwrap started by root without a user namespace), become the run's own uid.

    A fresh uid per execution makes RLIMIT_NPROC a per-execution process limit and lets the host
    find (and kill) every process of this execution by its uid.
    """
    uid = spec.get("uid")
    if uid is None or os.getuid() != 0:
        return
    gid = int(spec.get("gid", uid))
    os.setgroups([])
    os.setgid(gid)
    os.setuid(int(uid))
    if os.getuid() == 0 or os.geteuid() == 0:  # paranoia: never run the solution as root
        raise SystemExit("wmrl launcher: failed to drop root privileges")


def signal_started(fd) -> None:
    # Tells the host the sandbox came up; closed before the solution runs so it cannot forge it.
    if fd is None:
        return
    try:
        os.write(int(fd), b"1")
        os.close(int(fd))
    except OSError:
        pass


def run_solution(spec: dict) -> int:
    with open(spec["code_path"], encoding="utf-8") as f:
        source = f.read()
    lines = source.splitlines(keepends=True)
    linecache.cache[SOLUTION_NAME] = (len(source), None, lines, SOLUTION_NAME)
    os.chdir(spec["work_dir"])
    sys.argv = [SOLUTION_NAME]
    sys.path[0] = spec["work_dir"]  # helper modules the solution writes next to itself
    # The paper's prompt promises these as predefined variables as well as environment variables.
    namespace = {
        "__name__": "__main__",
        "__file__": os.path.join(spec["work_dir"], SOLUTION_NAME),
        "__builtins__": __builtins__,
        "DATA_DIR": spec["data_dir"],
        "SUBMISSION_PATH": spec["submission_path"],
    }
    try:
        exec(compile(source, SOLUTION_NAME, "exec"), namespace)  # noqa: S102 -- running it is the point
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    except BaseException as exc:  # noqa: BLE001 -- anything the solution raises is reported
        # Drop the launcher's own frame: the agent sees a traceback of its solution only.
        tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
        text = "".join(traceback.format_exception(type(exc), exc, tb))
        try:
            with open(spec["traceback_path"], "w", encoding="utf-8") as f:
                f.write(text)
        except OSError:
            pass  # the traceback still goes to stderr
        sys.stderr.write(text)
        return 1
    return 0


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as f:
        spec = json.load(f)
    apply_limits(spec)
    drop_privileges(spec)
    signal_started(spec.get("started_fd"))
    # A normal interpreter exit, so files the solution left open are flushed and closed.
    sys.exit(run_solution(spec))


if __name__ == "__main__":
    main()
