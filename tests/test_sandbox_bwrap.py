"""The bwrap backend keeps the sandbox contract (wmrl/sandbox/base.py) with a real bubblewrap."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from wmrl.sandbox import SandboxConfig, SandboxError, SandboxLimits, make_backend
from wmrl.sandbox.bwrap import SANDBOX_PYTHON, SANDBOX_VENV, python_layout

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")

LIMITS = SandboxLimits(timeout_s=20, memory_mb=2048, max_procs=64)


@pytest.fixture
def public(tmp_path: Path) -> Path:
    d = tmp_path / "public"
    d.mkdir()
    (d / "train.csv").write_text("id,x,y\n1,0.5,1\n2,1.5,0\n")
    return d


def run(code: str, public: Path, tmp_path: Path, limits: SandboxLimits = LIMITS, **cfg):
    backend = make_backend(SandboxConfig(backend="bwrap", **cfg))
    return backend.run(code, public, tmp_path / "work", limits)


def test_data_dir_and_submission_path_are_python_variables_and_env(
    public: Path, tmp_path: Path
) -> None:
    code = "import os\nprint(DATA_DIR == os.environ['DATA_DIR'], SUBMISSION_PATH == os.environ['SUBMISSION_PATH'])"
    result = run(code, public, tmp_path)
    assert result.status == "ok" and result.stdout_tail == "True True\n"


def test_solution_reads_public_data_and_writes_its_submission(public: Path, tmp_path: Path) -> None:
    code = """
import pandas as pd
df = pd.read_csv(f"{DATA_DIR}/train.csv")
df[["id"]].assign(y=1).to_csv(SUBMISSION_PATH, index=False)
"""
    result = run(code, public, tmp_path)
    assert result.status == "ok", result.stderr_tail
    assert result.submission_path == str(tmp_path / "work" / "submission.csv")
    assert Path(result.submission_path).read_text() == "id,y\n1,1\n2,1\n"


def test_sklearn_fit_runs_inside(public: Path, tmp_path: Path) -> None:
    code = """
from sklearn.datasets import load_iris
from sklearn.linear_model import LogisticRegression
X, y = load_iris(return_X_y=True)
print(round(LogisticRegression(max_iter=500).fit(X, y).score(X, y), 2))
"""
    result = run(code, public, tmp_path)
    assert result.status == "ok", result.stderr_tail
    assert float(result.stdout_tail) > 0.9


def test_exception_gives_error_status_and_the_solutions_traceback(
    public: Path, tmp_path: Path
) -> None:
    result = run("def f():\n    return 1 / 0\nf()\n", public, tmp_path)
    assert result.status == "error" and result.exit_code == 1
    assert result.traceback.startswith(
        'Traceback (most recent call last):\n  File "solution.py", line 3'
    )
    assert "ZeroDivisionError" in result.traceback
    assert "launcher" not in result.traceback


def test_sys_exit_code_is_reported(public: Path, tmp_path: Path) -> None:
    result = run("import sys\nsys.exit(3)\n", public, tmp_path)
    assert (result.status, result.exit_code, result.traceback) == ("error", 3, None)


def test_timeout_status_and_wall_seconds(public: Path, tmp_path: Path) -> None:
    result = run("import time\ntime.sleep(30)\n", public, tmp_path, SandboxLimits(timeout_s=1.0))
    assert result.status == "timeout"
    assert 1.0 <= result.wall_seconds < 4.0


def test_cpu_seconds_and_peak_memory_are_measured(public: Path, tmp_path: Path) -> None:
    code = """
x = bytearray(300 * 1024**2)
x[::4096] = b"1" * len(x[::4096])
t = 0
for i in range(3_000_000):
    t += i
"""
    result = run(code, public, tmp_path)
    assert result.status == "ok"
    assert result.cpu_seconds > 0.1
    assert 300 <= result.peak_memory_mb < 600


def test_peak_memory_is_the_solutions_not_the_supervisors(public: Path, tmp_path: Path) -> None:
    # Linux carries ru_maxrss across fork + exec: a large supervising process (a long pytest run,
    # a coordinator holding a model) must not show up as the peak memory of a small solution.
    ballast = bytearray(400 * 1024**2)
    ballast[::4096] = b"1" * len(ballast[::4096])
    result = run("import time\ntime.sleep(0.5)", public, tmp_path)
    assert result.status == "ok"
    assert result.peak_memory_mb < 200
    del ballast


def test_runs_as_unprivileged_fresh_uid_when_started_as_root(public: Path, tmp_path: Path) -> None:
    if os.geteuid() != 0:
        # As a normal user bwrap maps the solution into a user namespace instead; CI runs as root.
        pytest.skip("only root switches to a per-execution uid")
    code = "import os\nprint(os.getuid(), os.geteuid())"
    uids = {run(code, public, tmp_path / str(i)).stdout_tail for i in range(2)}
    assert len(uids) == 2
    assert all(int(u.split()[0]) >= 1 << 30 for u in uids)


def test_no_gpu_means_cuda_is_hidden(public: Path, tmp_path: Path) -> None:
    result = run("import os\nprint(repr(os.environ['CUDA_VISIBLE_DEVICES']))", public, tmp_path)
    assert result.stdout_tail == "''\n"


def test_extra_bind_is_visible_read_only(public: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "weights.txt").write_text("w")
    code = """
print(open("/opt/cache/weights.txt").read())
try:
    open("/opt/cache/new.txt", "w")
except OSError as e:
    print(type(e).__name__)
"""
    result = run(code, public, tmp_path, extra_binds=[f"{cache}:/opt/cache"])
    assert result.stdout_tail == "w\nOSError\n"
    assert not (cache / "new.txt").exists()


def test_unreadable_public_dir_is_a_clear_error(public: Path, tmp_path: Path) -> None:
    if os.geteuid() != 0:
        # A normal user's solution runs as that user, who can read their own data; CI runs as root.
        pytest.skip("only root runs solutions as another uid")
    public.chmod(0o700)
    with pytest.raises(SandboxError, match="not world-readable"):
        run("pass", public, tmp_path)


# A failing import deep in a library: its traceback names the library's files.
TRACEBACK = """
import sys, sklearn, pandas
print(sys.prefix, sys.base_prefix, sys.executable, sklearn.__file__)
pandas.read_csv("/nonexistent.csv")
"""


def test_the_python_installation_appears_at_fixed_paths(public: Path, tmp_path: Path) -> None:
    import sys

    result = run(TRACEBACK, public, tmp_path)
    seen = result.stdout_tail + result.stderr_tail
    assert result.status == "error" and "FileNotFoundError" in seen
    assert "/site-packages/pandas/" in seen
    assert sys.prefix not in seen  # neither the checkout's venv ...
    if not sys.base_prefix.startswith("/usr/"):
        assert sys.base_prefix not in seen  # ... nor the interpreter's installation
    if sys.prefix != sys.base_prefix:
        assert result.stdout_tail.split()[0] == SANDBOX_VENV
        assert f"{SANDBOX_VENV}/lib/" in seen


def test_an_outcome_does_not_depend_on_where_the_venv_lies(public: Path, tmp_path: Path) -> None:
    import sys

    if sys.prefix == sys.base_prefix:
        pytest.skip("the tests do not run in a venv")
    elsewhere = tmp_path / "another" / "checkout" / ".venv"
    elsewhere.parent.mkdir(parents=True)
    elsewhere.symlink_to(sys.prefix)  # the same venv, seen from another install path
    here = run(TRACEBACK, public, tmp_path / "a")
    there = run(TRACEBACK, public, tmp_path / "b", python=str(elsewhere / "bin" / "python"))
    assert here.status == there.status == "error"
    assert (here.stdout_tail, here.stderr_tail) == (there.stdout_tail, there.stderr_tail)


def test_a_venv_made_with_copies_binds_its_own_interpreter(tmp_path: Path) -> None:
    base, venv = tmp_path / "base", tmp_path / "venv"
    (base / "bin").mkdir(parents=True)
    (base / "bin" / "python3.11").write_text("")
    (venv / "bin").mkdir(parents=True)
    (venv / "lib").mkdir()
    (venv / "bin" / "python3").write_text("")  # a copy, not a link
    (venv / "pyvenv.cfg").write_text(
        f"home = {base}/bin\nversion = 3.11.7\ncommand = {base}/bin/python3 -m venv --copies {venv}\n"
    )
    layout = python_layout(str(venv / "bin" / "python3"))
    assert layout.executable == f"{SANDBOX_VENV}/bin/python3"
    assert (str(venv / "bin" / "python3"), f"{SANDBOX_VENV}/bin/python3") in layout.binds
    assert (str(base), SANDBOX_PYTHON) in layout.binds
    assert layout.pyvenv_cfg == f"home = {SANDBOX_PYTHON}/bin\nversion = 3.11.7\n"
    assert str(tmp_path) not in "".join(t for t, _ in layout.symlinks)


def test_an_mps_client_shares_the_hosts_ipc_namespace_and_reaches_the_pipe_directory(
        public: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """launch.mps: an execution with a GPU share connects to the MPS daemon through its pipe directory and
    the host's IPC namespace; without MPS it keeps an IPC namespace of its own."""
    pipe = tmp_path / "mps" / "pipe"
    pipe.mkdir(parents=True)
    (pipe / "control").write_text("")
    code = ("import os\nprint(os.readlink('/proc/self/ns/ipc'), "
            "os.path.exists(os.environ.get('CUDA_MPS_PIPE_DIRECTORY', '/-') + '/control'))")
    host_ipc = os.readlink("/proc/self/ns/ipc")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(pipe))
    with_mps = run(code, public, tmp_path / "a", SandboxLimits(timeout_s=20, memory_mb=2048, max_procs=64, gpus=1))
    assert with_mps.status == "ok", with_mps.stderr_tail
    assert with_mps.stdout_tail == f"{host_ipc} True\n"
    monkeypatch.delenv("CUDA_MPS_PIPE_DIRECTORY")
    without = run(code, public, tmp_path / "b", SandboxLimits(timeout_s=20, memory_mb=2048, max_procs=64, gpus=1))
    ipc, seen = without.stdout_tail.split()
    assert ipc != host_ipc and seen == "False"
