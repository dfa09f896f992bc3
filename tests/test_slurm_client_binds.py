"""The coordinator in a container reaches Slurm: coordinator.sbatch finds the host's Slurm client (commands,
libraries, plugins, config, munge's socket) and binds it at the same paths (APPTAINER_BIND), and the
coordinator checks at start that `sbatch --version` and `squeue` work where it runs, saying in one line
what to bind when they do not.

Apptainer cannot run here; its stand-in is bubblewrap with the same bind semantics (a host path mounted at
the same path): an "image" is the host with the Slurm client hidden, and APPTAINER_BIND's entries are
mounted back over it, as `apptainer exec` mounts them. The Slurm client, munge and the controller are real
(the local cluster)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from launch_support import REPO, require_slurm, squeue_gone, wait_until

from wmrl.slurm.client import cancel_jobs, template_path

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None or shutil.which("sbatch") is None,
                                reason="needs bubblewrap and the Slurm client")
CLIENT = ("sbatch", "squeue", "sacct", "scontrol", "scancel")
PROBE = "from wmrl.slurm.client import check_slurm_client as c; import sys; c(sys.argv[1]); print('client ok')"


def template_binds() -> list[str]:
    out = subprocess.run(["bash", str(template_path("coordinator.sbatch")), "--slurm-binds"], capture_output=True,
                         text=True, timeout=60, check=True).stdout.strip()
    return out.split(",")


def slurm_config() -> dict[str, str]:
    out = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=60, check=True)
    return {k.strip(): v.strip() for k, _, v in (line.partition("=") for line in out.stdout.splitlines()) if v}


def client_paths() -> list[str]:
    """What an image without Slurm lacks, found independently of the template: the commands, the plugin
    directory (libslurm lives there on Debian), libmunge, the config directory and munge's socket."""
    config = slurm_config()
    plugins = config["PluginDir"].split(":")
    libmunge = subprocess.run(["ldd", f"{plugins[0]}/auth_munge.so"], capture_output=True, text=True,
                              check=True).stdout
    return [*(shutil.which(exe) for exe in CLIENT), *plugins, str(Path(config["SLURM_CONF"]).parent), "/run/munge",
            *(line.split()[2] for line in libmunge.splitlines() if "libmunge" in line)]


def in_image(argv: list[str], binds: list[str], hide: list[str] | None = None) -> subprocess.CompletedProcess:
    """Run ``argv`` in the stand-in image (the host minus ``hide``) with ``binds`` mounted back."""
    args = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    # a checkout or venv under /tmp (a CI clone) stays visible through the image's own /tmp
    args += [arg for path in (str(REPO), sys.prefix) if path.startswith("/tmp/") for arg in ("--ro-bind", path, path)]
    for path in client_paths() if hide is None else hide:
        args += ["--tmpfs", path] if os.path.isdir(path) else ["--ro-bind", "/dev/null", path]
    for path in binds:
        args += ["--bind", path, path]
    return subprocess.run([*args, "--setenv", "APPTAINER_CONTAINER", "/images/learner.sif", *argv],
                          capture_output=True, text=True, timeout=120, check=False)


def test_template_lists_every_host_path_of_the_slurm_client():
    require_slurm()
    binds = template_binds()
    assert all(os.path.exists(p) for p in binds), binds
    assert set(client_paths()) <= set(binds)


def test_coordinator_without_the_slurm_client_says_what_to_bind():
    require_slurm()
    done = in_image([sys.executable, "-c", PROBE, "python"], binds=[])
    assert done.returncode != 0
    error = done.stderr.strip().splitlines()[-1]
    assert "`sbatch --version` fails where the coordinator runs" in error and "in container /images/learner.sif" in error
    assert "bind the host's Slurm client" in error and "/run/munge" in error


def test_coordinator_without_munges_socket_fails_on_squeue():
    require_slurm()
    done = in_image([sys.executable, "-c", PROBE, "python"], binds=[], hide=["/run/munge"])
    assert done.returncode != 0
    assert "`squeue --noheader --format=%i --me` fails" in done.stderr.strip().splitlines()[-1]


def test_coordinator_with_the_templates_binds_reaches_the_controller():
    require_slurm()
    done = in_image([sys.executable, "-c", PROBE, "python"], binds=template_binds())
    assert done.returncode == 0, done.stderr
    assert "client ok" in done.stdout


def test_coordinator_in_a_container_needs_launch_python_for_its_workers():
    require_slurm()
    done = in_image([sys.executable, "-c", PROBE, ""], binds=template_binds())
    assert done.returncode != 0
    assert "launch.python is empty, so the worker jobs would run this container's interpreter" in done.stderr


FAKE_APPTAINER = """#!/bin/bash
# `apptainer exec IMAGE CMD...` stand-in: the image is the host without the Slurm client (HIDE), and
# APPTAINER_BIND's entries are mounted at the same paths, as apptainer does.
shift 2
args=(--ro-bind / / --dev /dev --proc /proc)
IFS=, read -ra hide <<<"$HIDE"; IFS=, read -ra binds <<<"${APPTAINER_BIND:-}"
for p in "${hide[@]}"; do if [[ -d $p ]]; then args+=(--tmpfs "$p"); else args+=(--ro-bind /dev/null "$p"); fi; done
for p in "${binds[@]}"; do [[ -n $p ]] && args+=(--bind "$p" "$p"); done
exec bwrap "${args[@]}" --setenv APPTAINER_CONTAINER /images/learner.sif "$@"
"""


@pytest.mark.slurm
@pytest.mark.timeout(180)
@pytest.mark.parametrize(("binds", "expected"), [("auto", "client ok"), ("none", "`sbatch --version` fails")])
def test_coordinator_job_binds_the_hosts_slurm_client_into_its_container(tmp_path, binds, expected):
    """A real coordinator.sbatch job whose $WMRL is the stand-in container: the batch shell's binds reach
    the job step, where the coordinator's check runs (WMRL_SLURM_BINDS=none: it fails, naming what to bind)."""
    require_slurm()
    fake = tmp_path / "apptainer"
    fake.write_text(FAKE_APPTAINER)
    probe = tmp_path / "probe.py"  # stands for `wmrl coordinator RUN_DIR`: the start-up check only
    probe.write_text(f"import sys\n{PROBE.replace('sys.argv[1]', repr('python'))}\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "HIDE": ",".join(client_paths()), "WMRL_SLURM_BINDS": binds,
           "WMRL": f"bash {fake} exec /images/learner.sif {sys.executable} {probe}"}
    env.pop("APPTAINER_BIND", None)
    out = subprocess.run(["sbatch", "--parsable", f"--chdir={tmp_path}", "--time=5", "--cpus-per-task=1",
                          "--output=job.out", str(template_path("coordinator.sbatch")), str(tmp_path / "run")],
                         env=env, check=True, capture_output=True, text=True, timeout=30, cwd=tmp_path).stdout
    job = out.strip().split(";")[0]
    try:
        wait_until("the job to end", lambda: squeue_gone(job), 150, every_s=1)
    finally:
        cancel_jobs([job])
    assert expected in (tmp_path / "job.out").read_text()
