"""The local development/CI Slurm cluster (slurm/start-local.sh) does what wmrl relies on.

Real Slurm, real jobs: array tasks run in parallel, sacct reports states (submitit polls it),
submitit returns results, one array task can be cancelled, a requeued job restarts at once with
`slurm/requeue-now.sh`, and the bubblewrap sandbox works inside a job step.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[1]
REQUEUE_NOW = REPO / "slurm" / "requeue-now.sh"
USABLE_NODE_STATES = {"idle", "mixed", "allocated", "completing"}


def _run(*cmd: str, timeout: float = 30, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        cmd, check=False, capture_output=True, text=True, timeout=timeout, env=env
    )
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def _cluster_problem() -> str | None:
    """Why the local cluster cannot be used, or None when it is up."""
    if shutil.which("sinfo") is None:
        return "sinfo is not on PATH (install with slurm/install-local.sh)"
    try:
        states = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%T"],
            check=False,
            capture_output=True,
            text=True,
            timeout=15,
        )
    except subprocess.TimeoutExpired:
        return "sinfo did not answer within 15 s (start the cluster with slurm/start-local.sh)"
    usable = {s.strip().rstrip("*~#") for s in states.stdout.split()} & USABLE_NODE_STATES
    if states.returncode != 0 or not usable:
        detail = (states.stderr or states.stdout).strip() or "no usable node"
        return f"the Slurm cluster is not up ({detail}); start it with slurm/start-local.sh"
    return None


@pytest.fixture(scope="module")
def cluster() -> None:
    problem = _cluster_problem()
    if problem is not None:
        # .ci/run starts the cluster and sets this, so a broken start fails CI instead of skipping.
        if os.environ.get("WMRL_REQUIRE_SLURM") == "1":
            pytest.fail(f"WMRL_REQUIRE_SLURM=1 but {problem}")
        pytest.skip(problem)


def _wait_for(what: str, check: Callable[[], bool], timeout: float, job: str = "") -> None:
    """Poll ``check``; on timeout say what Slurm thinks of ``job`` (pending on what, running where)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            state = ""
            if job:
                shown = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True, check=False)
                queue = subprocess.run(["squeue", "-o", "%i %T %r %j"], capture_output=True, text=True, check=False)
                state = f"\nscontrol show job {job}:\n{shown.stdout or shown.stderr}\nsqueue:\n{queue.stdout}"
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}{state}")
        time.sleep(0.2)


def _sbatch(workdir: Path, script: str, *options: str) -> str:
    path = workdir / "job.sh"
    path.write_text("#!/bin/bash\n" + script)
    out = _run(
        "sbatch",
        "--parsable",
        f"--chdir={workdir}",
        f"--output={workdir}/%x-%A_%a.out",
        *options,
        str(path),
    )
    return out.strip().split(";")[0]


def _squeue_states(job: str) -> dict[str, str]:
    """Array task or job id -> state, for what the controller still lists."""
    out = _run("squeue", "-h", "-r", "-j", job, "-o", "%i %T")
    return dict(line.split() for line in out.splitlines() if line.strip())


def _left_queue(job: str) -> bool:
    return not _squeue_states(job)


def _sacct_states(job: str) -> dict[str, str]:
    """Job (or array task) id -> state, as the accounting database reports it."""
    out = _run("sacct", "-n", "-X", "-P", "-j", job, "-o", "JobID,State")
    return dict(line.split("|")[:2] for line in out.splitlines() if line.strip())


def _cancel(job: str) -> None:
    subprocess.run(["scancel", job], check=False, capture_output=True, timeout=30)


@pytest.fixture(scope="module")
def finished_array(
    cluster: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path]]:
    """A 4-task array job whose tasks record their start and end times, run to completion."""
    workdir = tmp_path_factory.mktemp("array")
    script = (
        'date +%s.%N > "stamps_${SLURM_ARRAY_TASK_ID}.start"\n'
        "sleep 10\n"  # all four must start within it: slurmd launching them on 2 loaded cores takes seconds
        'date +%s.%N > "stamps_${SLURM_ARRAY_TASK_ID}.end"\n'
    )
    job = _sbatch(workdir, script, "--array=0-3", "--job-name=parallel")
    try:
        _wait_for(f"array job {job} to finish", lambda: _left_queue(job), timeout=90)
        yield job, workdir
    finally:
        _cancel(job)


def test_array_tasks_run_in_parallel(finished_array: tuple[str, Path]) -> None:
    _, workdir = finished_array
    starts = [float((workdir / f"stamps_{i}.start").read_text()) for i in range(4)]
    ends = [float((workdir / f"stamps_{i}.end").read_text()) for i in range(4)]
    # All four were running at the same moment: the last one started before the first one ended.
    assert max(starts) < min(ends)


def test_sacct_reports_completed_array_tasks(finished_array: tuple[str, Path]) -> None:
    job, _ = finished_array
    states: dict[str, str] = {}

    def all_completed() -> bool:
        states.update(_sacct_states(job))
        return {f"{job}_{i}" for i in range(4)} <= {
            k for k, v in states.items() if v == "COMPLETED"
        }

    _wait_for(f"sacct to report {job}_0..3 COMPLETED", all_completed, 30)


@pytest.mark.timeout(180)
def test_submitit_job_returns_python_result(cluster: None, tmp_path: Path) -> None:
    import submitit

    executor = submitit.AutoExecutor(folder=tmp_path, cluster="slurm")
    executor.update_parameters(timeout_min=5, cpus_per_task=1)
    # A stdlib function pickles by reference, so the job needs no import of this test module; its
    # result, read in the job, is the job's own Slurm id.
    job = executor.submit(os.getenv, "SLURM_JOB_ID")
    assert job.result() == job.job_id


@pytest.mark.timeout(120)
def test_scancel_of_one_array_task_leaves_the_others_running(cluster: None, tmp_path: Path) -> None:
    job = _sbatch(tmp_path, "sleep 120\n", "--array=0-3", "--job-name=cancel-one")
    try:
        tasks = {f"{job}_{i}" for i in range(4)}
        _wait_for(
            f"all tasks of {job} to run",
            lambda: {t for t, s in _squeue_states(job).items() if s == "RUNNING"} == tasks,
            timeout=60,
        )
        _run("scancel", f"{job}_1")
        _wait_for(f"{job}_1 to leave the queue", lambda: f"{job}_1" not in _squeue_states(job), 30)
        assert _squeue_states(job) == {f"{job}_{i}": "RUNNING" for i in (0, 2, 3)}
        _wait_for(
            f"sacct to report {job}_1 CANCELLED",
            lambda: _sacct_states(job).get(f"{job}_1", "").startswith("CANCELLED"),
            timeout=30,
        )
    finally:
        _cancel(job)


@pytest.mark.timeout(120)
def test_requeue_now_restarts_job_with_restart_count_one(cluster: None, tmp_path: Path) -> None:
    runs = tmp_path / "runs.txt"
    script = f'echo "${{SLURM_RESTART_COUNT:-0}}" >> {runs}\nsleep 120\n'
    job = _sbatch(tmp_path, script, "--requeue", "--job-name=requeue")
    try:
        _wait_for(f"job {job} to start", lambda: runs.exists() and runs.read_text() != "", 60)
        _run(str(REQUEUE_NOW), job, timeout=90)
        _wait_for(f"job {job} to run again", lambda: len(runs.read_text().split()) >= 2, 60)
        assert runs.read_text().split() == ["0", "1"]
    finally:
        _cancel(job)


@pytest.mark.timeout(60)
def test_job_step_runs_as_root_with_the_submitters_environment(cluster: None) -> None:
    env = {**os.environ, "WMRL_PROBE": "carried"}
    out = _run(
        "srun",
        "--quiet",
        "--ntasks=1",
        "sh",
        "-c",
        'echo "$(id -u) $WMRL_PROBE $HOME"',
        timeout=60,
        env=env,
    )
    assert out.split() == ["0", "carried", os.environ.get("HOME", "/root")]


@pytest.mark.timeout(60)
def test_bwrap_isolates_network_and_pids_inside_a_job_step(cluster: None) -> None:
    if shutil.which("bwrap") is None:
        pytest.fail("bwrap is not installed (Debian package bubblewrap)")
    # Inside the sandbox: only the loopback interface, and the shell is one of the first pids.
    # (/proc/net/dev lists the interfaces of the sandbox's own network namespace.)
    probe = "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\\n' ' '; echo; echo $$"
    out = _run(
        "srun",
        "--quiet",
        "--ntasks=1",
        "bwrap",
        "--unshare-net",
        "--unshare-pid",
        "--die-with-parent",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
        "sh",
        "-c",
        probe,
        timeout=60,
    )
    interfaces, pid = out.splitlines()
    assert interfaces.split() == ["lo"]
    assert int(pid) <= 3


TEMPLATES = REPO / "slurm" / "templates"

# Stands in for `wmrl` in the sbatch templates: records its start (with Slurm's restart count) and
# a USR1, which it answers like the real commands (worker: exit 0; coordinator: checkpoint, exit 128+10).
STUB_WMRL = """#!/bin/bash
role=$1 run_dir=$2
log="$run_dir/$role-${SLURM_ARRAY_TASK_ID:-0}.log"
trap 'echo usr1 >> "$log"; [[ $role == worker ]] && exit 0; exit 138' USR1
echo "start ${SLURM_RESTART_COUNT:-0}" >> "$log"
if [[ $role == coordinator && ${SLURM_RESTART_COUNT:-0} -ge 1 ]]; then exit 0; fi
while true; do sleep 0.2; done
"""


def _submit_template(tmp_path: Path, template: str, *options: str) -> str:
    stub = tmp_path / "stub-wmrl"
    stub.write_text(STUB_WMRL)
    stub.chmod(0o755)
    out = _run(
        "sbatch",
        "--parsable",
        f"--chdir={tmp_path}",
        *options,
        str(TEMPLATES / template),
        str(tmp_path),
        env={**os.environ, "WMRL": str(stub)},
    )
    return out.strip().split(";")[0]


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.timeout(120)
def test_workers_template_forwards_usr1_to_each_worker(cluster: None, tmp_path: Path) -> None:
    job = _submit_template(tmp_path, "workers.sbatch", "--array=0-3%4", "--time=5")
    try:
        logs = [tmp_path / f"worker-{i}.log" for i in range(4)]
        _wait_for("4 workers to start", lambda: all(_lines(p) == ["start 0"] for p in logs), 60)
        # What Slurm does 120 s before the time limit (--signal=B:USR1@120): signal the batch shell.
        _run("scancel", "--batch", "--signal=USR1", job)
        _wait_for(f"array job {job} to finish", lambda: _left_queue(job), 30)
        assert [_lines(p) for p in logs] == [["start 0", "usr1"]] * 4
        _wait_for(
            f"sacct to report {job}_0..3 COMPLETED",
            lambda: sorted(_sacct_states(job).values()) == ["COMPLETED"] * 4,
            timeout=30,
        )
    finally:
        _cancel(job)


@pytest.mark.timeout(120)
def test_coordinator_template_requeues_itself_after_usr1(cluster: None, tmp_path: Path) -> None:
    job = _submit_template(tmp_path, "coordinator.sbatch", "--time=5")
    log = tmp_path / "coordinator-0.log"
    try:
        _wait_for("the coordinator to start", lambda: _lines(log) == ["start 0"], 60, job)
        _run("scancel", "--batch", "--signal=USR1", job)
        # The job requeues itself; lift the cred_expire delay so the test need not wait it out.
        _run(str(REQUEUE_NOW), job, "--no-requeue", timeout=90)
        _wait_for(f"job {job} to finish", lambda: _left_queue(job), 60)
        assert _lines(log) == ["start 0", "usr1", "start 1"]
    finally:
        _cancel(job)


# Stands in for `vllm` in the world-model template: records its command line and answers /health.
STUB_VLLM = """#!/bin/bash
echo "$@" > "$STUB_ARGV"
while [[ $# -gt 0 ]]; do [[ $1 == --port ]] && port=$2; shift; done
exec python3 -c '
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
' "$port"
"""


@pytest.mark.timeout(120)
def test_vllm_serve_template_publishes_the_url_once_the_server_is_healthy(cluster: None, tmp_path: Path) -> None:
    import socket
    import urllib.request

    stub = tmp_path / "stub-vllm"
    stub.write_text(STUB_VLLM)
    stub.chmod(0o755)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "VLLM": str(stub), "STUB_ARGV": str(tmp_path / "argv")}
    # --gres=none: the local node has no GPU; on a cluster the template asks for one.
    job = _run("sbatch", "--parsable", "--gres=none", "--time=5", f"--chdir={tmp_path}",
               str(TEMPLATES / "vllm-serve.sbatch"), "/models/qwen", str(tmp_path / "run"), str(port),
               env=env).strip().split(";")[0]
    url_file = tmp_path / "run" / "world_model_url"
    try:
        _wait_for("the template to publish the world model's URL", url_file.exists, 60)
        url = url_file.read_text().strip()
        assert url.startswith("http://") and url.endswith(f":{port}/v1")
        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5).status == 200
        assert (tmp_path / "argv").read_text().split() == [
            "serve", "/models/qwen", "--served-model-name", "/models/qwen", "--host", "0.0.0.0", "--port", str(port),
            "--max-model-len", "13312", "--generation-config", "vllm", "--language-model-only"]
    finally:
        _cancel(job)
