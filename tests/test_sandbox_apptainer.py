"""The apptainer backend: its exact command line, its scrubbed environment, and its timeout kill.

Apptainer cannot be installed here. The command line is checked as data; the run-time logic
(process group, timeout, result record) runs against a stand-in ``apptainer`` on PATH that turns
the apptainer command into an equivalent bubblewrap one (binds, --pwd, --env; no isolation beyond
the mounts), so only apptainer itself is replaced.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import time
from pathlib import Path

import pytest

from wmrl.config import ConfigError
from wmrl.sandbox import SandboxConfig, SandboxLimits, make_backend
from wmrl.sandbox.apptainer import build_argv, host_env

FAKE_APPTAINER = r'''#!PYTHON
"""Stand-in for `apptainer exec`: log the call, then run the command under plain bwrap mounts."""
import json, os, sys
from pathlib import Path
args = sys.argv[1:]
Path(__file__).with_suffix(".log").write_text(json.dumps({"argv": sys.argv, "env": dict(os.environ)}))
assert args.pop(0) == "exec"
binds, env, pwd, workdir = [], {}, "/", None
while args[0].startswith("--"):
    flag = args.pop(0)
    if flag == "--bind":
        binds.append(args.pop(0))
    elif flag == "--workdir":  # as apptainer does under --contain: WORKDIR/tmp, WORKDIR/var_tmp
        workdir = args.pop(0)
    elif flag == "--env":
        key, _, value = args.pop(0).partition("=")
        env[key] = value
    elif flag == "--pwd":
        pwd = args.pop(0)
    elif flag == "--network":
        args.pop(0)
image, command = args[0], args[1:]
bw = ["bwrap"]
for name in os.listdir("/"):
    path = "/" + name
    if os.path.islink(path):
        bw += ["--symlink", os.readlink(path), path]
    elif os.path.isdir(path):
        bw += ["--dev-bind", path, path]
bw += ["--dir", "/sandbox"]
if workdir:
    for sub, dest in (("tmp", "/tmp"), ("var_tmp", "/var/tmp")):
        os.makedirs(f"{workdir}/{sub}", mode=0o1777, exist_ok=True)
        binds.insert(0, f"{workdir}/{sub}:{dest}")
    # The "image" here is the host's root: an interpreter that lives under the host's /tmp (a clone and
    # its venv there) must stay visible once the scratch dirs cover /tmp, as a real image's python does.
    here = os.path.realpath(command[0])
    for tmp_root in ("/tmp/", "/var/tmp/"):
        if command[0].startswith(tmp_root) or here.startswith(tmp_root):
            for path in {os.path.dirname(os.path.dirname(p)) for p in (command[0], here)}:
                binds.append(f"{os.path.dirname(path)}:{os.path.dirname(path)}:ro")
for spec in binds:
    src, dest, *mode = spec.split(":")
    bw += ["--ro-bind" if mode == ["ro"] else "--bind", src, dest]
bw += ["--chdir", pwd, "--clearenv"]
for key, value in env.items():
    bw += ["--setenv", key, value]
os.execvp("bwrap", bw + command)
'''

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")


@pytest.fixture
def fake_apptainer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "apptainer"
    script.write_text(FAKE_APPTAINER.replace("PYTHON", sys.executable))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    return script


@pytest.fixture
def image(tmp_path: Path) -> Path:
    sif = tmp_path / "sandbox.sif"
    sif.write_bytes(b"not really an image")
    return sif


@pytest.fixture
def public(tmp_path: Path) -> Path:
    d = tmp_path / "public"
    d.mkdir()
    (d / "train.csv").write_text("a\n1\n")
    return d


def test_command_line_is_the_designed_one() -> None:
    argv = build_argv(
        "apptainer", "/img/sandbox.sif", "python", Path("/d/public"), Path("/w/1"),
        Path("/s/in"), Path("/s/out"), Path("/s/tmp"), Path("/s/shm"), SandboxLimits(gpus=0), [],
        {"DATA_DIR": "/sandbox/data"},
    )  # fmt: skip
    assert argv == [
        "apptainer", "exec", "--containall", "--cleanenv", "--no-home", "--net", "--network", "none",
        "--bind", "/d/public:/sandbox/data:ro", "--bind", "/w/1:/sandbox/work",
        "--bind", "/s/in:/sandbox/in:ro", "--bind", "/s/out:/sandbox/out",
        "--workdir", "/s/tmp", "--bind", "/s/shm:/dev/shm",
        "--pwd", "/sandbox/work", "--env", "DATA_DIR=/sandbox/data",
        "/img/sandbox.sif", "python", "-s", "-B", "/sandbox/in/launcher.py", "/sandbox/in/spec.json",
    ]  # fmt: skip


def test_gpus_add_nv_and_extra_binds_are_read_only() -> None:
    argv = build_argv(
        "apptainer", "/img.sif", "python", Path("/p"), Path("/w"), Path("/i"), Path("/o"),
        Path("/t"), Path("/m"), SandboxLimits(gpus=1), ["/models:/opt/models"], {},
    )  # fmt: skip
    assert "--nv" in argv
    assert argv[argv.index("/models:/opt/models:ro") - 1] == "--bind"


def test_host_bind_variables_are_scrubbed() -> None:
    env = host_env(
        {
            "PATH": "/usr/bin",
            "HOME": "/home/u",
            "APPTAINER_BIND": "/secret",
            "APPTAINER_BINDPATH": "/secret",
            "SINGULARITY_BIND": "/secret",
            "SINGULARITY_BINDPATH": "/secret",
            "APPTAINERENV_LEAK": "x",
            "AWS_SECRET_ACCESS_KEY": "x",
        }
    )
    assert env == {"PATH": "/usr/bin", "HOME": "/home/u"}


def test_missing_image_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="apptainer_image"):
        make_backend(SandboxConfig(backend="apptainer"))


def test_runs_a_solution_through_apptainer(
    fake_apptainer: Path, image: Path, public: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("APPTAINER_BIND", "/etc:/leak")
    backend = make_backend(
        SandboxConfig(backend="apptainer", apptainer_image=str(image), python=sys.executable)
    )
    code = (
        "import os\nprint(DATA_DIR, os.listdir(DATA_DIR))\nopen(SUBMISSION_PATH, 'w').write('a\\n')"
    )
    result = backend.run(code, public, tmp_path / "work", SandboxLimits(timeout_s=20))
    assert result.status == "ok", result.stderr_tail
    assert result.stdout_tail == "/sandbox/data ['train.csv']\n"
    assert result.submission_path == str(tmp_path / "work" / "submission.csv")
    called = json.loads(fake_apptainer.with_suffix(".log").read_text())
    assert "APPTAINER_BIND" not in called["env"]


def test_timeout_kills_the_whole_process_group(
    fake_apptainer: Path, image: Path, public: Path, tmp_path: Path
) -> None:
    marker = f"wmrl-apptainer-child-{os.getpid()}-{time.monotonic_ns()}"
    backend = make_backend(
        SandboxConfig(backend="apptainer", apptainer_image=str(image), python=sys.executable)
    )
    code = f"""
import subprocess, time
subprocess.Popen(["/bin/sh", "-c", "sleep 300; : {marker}"])
while True:
    time.sleep(0.1)
"""
    result = backend.run(code, public, tmp_path / "work", SandboxLimits(timeout_s=2))
    assert result.status == "timeout"
    assert result.wall_seconds < 2 + 3
    assert _processes_with(marker) == []


@pytest.mark.parametrize("where", ["/tmp", "/var/tmp", "/dev/shm", "/sandbox/work"])
def test_everything_it_can_write_counts_toward_the_disk_quota(
    fake_apptainer: Path, image: Path, public: Path, tmp_path: Path, where: str
) -> None:
    # Under apptainer /tmp, /var/tmp and /dev/shm are host directories on the scratch disk.
    backend = make_backend(
        SandboxConfig(
            backend="apptainer", apptainer_image=str(image), python=sys.executable,
            scratch_dir=str(tmp_path),
        )
    )  # fmt: skip
    # The watchdog walks every 0.05 s, so what the solution writes in between passes the quota:
    # at page-cache speed a CI disk took all of 160 MB before the first walk. So the solution
    # writes 1.25 GB, and the quota must stop it long before the end.
    code = f"""
import time
block = b"x" * (1 << 20)
for i in range(160):  # 160 files of 8 MB: 1.25 GB against a quota of 32 MB
    with open(f"{where}/f{{i}}.bin", "wb") as f:
        for _ in range(8):
            f.write(block)
print("wrote everything")
time.sleep(20)
"""
    lim = SandboxLimits(timeout_s=30, disk_quota_mb=32)
    result = backend.run(code, public, tmp_path / "work", lim)
    assert result.status == "disk_quota", (result.stderr_tail, result.extra)
    assert "wrote everything" not in result.stdout_tail
    assert result.wall_seconds < 20
    assert not list(tmp_path.glob("wmrl-sbx-*"))  # the scratch (its /tmp, /dev/shm) is gone


def _processes_with(marker: str) -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            continue
    return found


def test_an_mps_client_keeps_the_host_ipc_namespace_and_sees_the_pipe_directory() -> None:
    """launch.mps: the execution is an MPS client; `--containall` would give it an IPC namespace of its own
    (it is --contain --cleanenv --ipc --pid), so the command spells out all of it but --ipc."""
    args = ("apptainer", "/img.sif", "python", Path("/p"), Path("/w"), Path("/i"), Path("/o"), Path("/t"), Path("/m"))
    mps = build_argv(*args, SandboxLimits(gpus=1), [], {"CUDA_MPS_PIPE_DIRECTORY": "/tmp/wmrl-mps-x/pipe"})
    assert "--containall" not in mps and mps[2:6] == ["--contain", "--pid", "--cleanenv", "--no-home"]
    assert mps[mps.index("/tmp/wmrl-mps-x/pipe:/tmp/wmrl-mps-x/pipe") - 1] == "--bind"
    no_gpu = build_argv(*args, SandboxLimits(gpus=0), [], {"CUDA_MPS_PIPE_DIRECTORY": "/tmp/wmrl-mps-x/pipe"})
    assert "--containall" in no_gpu and "/tmp/wmrl-mps-x/pipe:/tmp/wmrl-mps-x/pipe" not in no_gpu
