"""The plain-sbatch templates run real wmrl commands: the command each template's job step runs exists in
the CLI, and coordinator.sbatch really trains a run (written by `wmrl launch --no-submit`) on the local
Slurm, checkpoints on Slurm's USR1 warning, requeues itself and resumes bit-identical."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from launch_support import (
    REPO,
    dry_config,
    events,
    final_digest,
    progress_step,
    require_slurm,
    squeue_gone,
    uninterrupted_digest,
    wait_until,
)

from wmrl.cli.main import build_parser
from wmrl.config import to_yaml
from wmrl.slurm.client import cancel_jobs, template_path
from wmrl.storage.rundir import RunDir

TEMPLATES = REPO / "slurm" / "templates"
REQUEUE_NOW = str(REPO / "slurm" / "requeue-now.sh")


def job_step_command(template: str, run_dir: str) -> list[str]:
    """The command line of the template's `srun ... $WMRL CMD ...` step, with WMRL=wmrl, srun's options cut."""
    lines = [line for line in (TEMPLATES / template).read_text().splitlines() if line.startswith("srun ")]
    assert len(lines) == 1, f"{template}: expected one srun line, got {lines}"
    rendered = lines[0].replace("$WMRL", "wmrl").replace('"$RUN_DIR"', shlex.quote(run_dir)).rstrip(" &")
    argv = shlex.split(rendered)
    return argv[argv.index("wmrl"):]


@pytest.mark.parametrize(("template", "command"), [("coordinator.sbatch", "coordinator"),
                                                    ("workers.sbatch", "worker")])
def test_template_job_step_runs_a_command_of_the_wmrl_cli(template, command, tmp_path):
    argv = job_step_command(template, str(tmp_path / "run"))
    assert argv[:2] == ["wmrl", command]
    parsed = build_parser().parse_args(argv[1:])  # SystemExit (2) for an unknown command or argument
    assert parsed.command == command and parsed.run_dir == str(tmp_path / "run")


def test_launch_no_submit_writes_the_run_directory_and_prints_the_sbatch_lines(tmp_path):
    config = tmp_path / "dry.yaml"
    config.write_text(to_yaml(dry_config(tmp_path, "plain", 2, "launch.executor=slurm", "launch.workers=3")))
    done = subprocess.run([sys.executable, "-m", "wmrl.cli.main", "launch", str(config), "--no-submit"], cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    run = RunDir.open(tmp_path / "plain")
    # each line asks for what the submitted job would (the config's defaults: 1 task, 2 CPUs, 24 h; the
    # workers 4 h each, and what one execution takes: sandbox.threads CPUs, sandbox.memory_mb + the
    # worker's own 2048 MB)
    assert ("sbatch --nodes=1 --ntasks-per-node=1 --cpus-per-task=2 --time=1440 "
            f"{TEMPLATES.resolve() / 'coordinator.sbatch'} {run.path}") in done.stdout
    assert (f"sbatch --array=0-2 --cpus-per-task=1 --mem=10240MB --time=240 {TEMPLATES.resolve() / 'workers.sbatch'} "
            f"{run.path}") in done.stdout
    assert not (run.path / "jobs").exists() or not list((run.path / "jobs").iterdir())  # nothing submitted


def test_templates_are_package_data_and_slurm_templates_links_to_them():
    shipped = sorted(p.name for p in template_path("coordinator.sbatch").parent.glob("*.sbatch"))
    assert shipped == ["coordinator.sbatch", "mlflow-server.sbatch", "vllm-serve.sbatch", "workers.sbatch"]
    assert template_path("coordinator.sbatch").parent == (REPO / "wmrl" / "slurm" / "templates")
    assert TEMPLATES.resolve() == template_path("workers.sbatch").parent  # the checkout's path still works


@pytest.mark.slurm
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_pip_installed_wmrl_prints_sbatch_lines_that_run_from_any_directory(tmp_path):
    """A wheel of the package, unpacked into a directory of its own as pip installs it; `wmrl launch --no-submit` of the
    9B config run from an unrelated directory prints template paths of that install, and `sbatch
    --test-only` of the local Slurm accepts each printed line (the job's sizes shrunk to its one node)."""
    require_slurm()
    source = tmp_path / "src"  # a copy: building in the checkout would write build/ into the shared tree
    shutil.copytree(REPO / "wmrl", source / "wmrl", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", source)
    shutil.copy(REPO / "README.md", source)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"), str(source)],
                   check=True, timeout=240, capture_output=True)
    with zipfile.ZipFile(next((tmp_path / "dist").glob("wmrl-*.whl"))) as wheel:  # what pip install unpacks
        wheel.extractall(tmp_path / "site")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    image = tmp_path / "sandbox.sif"
    image.touch()
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    done = subprocess.run(
        [sys.executable, "-m", "wmrl.cli.main", "launch", str(REPO / "configs" / "qwen3.5-9b.yaml"), "--no-submit",
         f"runs_root={tmp_path / 'runs'}", "tasks.root=''", f"sandbox.apptainer_image={image}",
         # the local node: 16 CPUs, 18 GB, 8 fake GPUs
         "launch.coordinator_cpus=2", "launch.coordinator_sbatch=[--mem=1G]", "sandbox.memory_mb=4096"],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr
    lines = [line.split("sbatch ", 1)[1].split() for line in done.stdout.splitlines() if "sbatch --" in line]
    assert len(lines) == 2
    for argv in lines:
        template = Path(argv[-2])
        assert template.is_absolute() and template.is_file(), template
        assert template.is_relative_to(tmp_path / "site"), template  # the install's own copy
        assert Path(argv[-1]).is_absolute() and (Path(argv[-1]) / "config.yaml").is_file()
        accepted = subprocess.run(["sbatch", "--test-only", *argv], cwd=elsewhere, capture_output=True, text=True,
                                  timeout=60, check=False)
        assert accepted.returncode == 0 and "to start at" in accepted.stderr, (argv, accepted.stderr)
    workers = dict(o.removeprefix("--").partition("=")[::2] for o in lines[1][:-2])
    assert workers["mem"] == "12288MB" and workers["cpus-per-task"] == "16"  # 2 x (4096 + 2048) MB, 2 x 8 CPUs


@pytest.mark.slurm
@pytest.mark.timeout(420)
def test_coordinator_template_trains_checkpoints_on_usr1_requeues_and_resumes_identical(tmp_path):
    require_slurm()
    # launch.executor=local: the coordinator job runs its workers in its own allocation.
    cfg = dry_config(tmp_path, "sbatch", 6, "launch.executor=local")
    config = tmp_path / "sbatch.yaml"
    config.write_text(to_yaml(cfg))
    env = {**os.environ, "PYTHONPATH": str(REPO), "WMRL": f"{sys.executable} -m wmrl.cli.main"}
    subprocess.run([sys.executable, "-m", "wmrl.cli.main", "launch", str(config), "--no-submit"], cwd=REPO,
                   env=env, check=True, capture_output=True, timeout=120)
    run = RunDir.open(tmp_path / "sbatch")
    out = subprocess.run(["sbatch", "--parsable", f"--chdir={tmp_path}", "--time=10", "--cpus-per-task=2",
                          str(TEMPLATES / "coordinator.sbatch"), str(run.path)],
                         env=env, check=True, capture_output=True, text=True, timeout=30).stdout
    job = out.strip().split(";")[0]
    try:
        wait_until("step 2", lambda: progress_step(run) >= 2, 180)
        # Slurm's warning before the time limit (--signal=B:USR1@300) reaches the batch shell:
        subprocess.run(["scancel", "--batch", "--signal=USR1", job], check=True, timeout=30)
        subprocess.run([REQUEUE_NOW, job, "--no-requeue"], check=True, timeout=90)  # the job requeues itself
        wait_until("the run to finish", run.is_ended, 240, every_s=1)
        wait_until("the job to leave the queue", lambda: squeue_gone(job), 60)
    finally:
        run.mark_ended("test over")
        cancel_jobs([job])
    terminated, resumed = events(run, "terminated")[-1], events(run, "resumed")[-1]
    assert terminated["signal"] == "SIGUSR1" and resumed["restart_count"] == "1"
    assert resumed["step"] == terminated["step"] and resumed["identical"] is True
    assert run.ended_reason() == "finished"
    assert re.search(r"wmrl coordinator: finished at step 6", (tmp_path / f"wmrl-coordinator-{job}.out").read_text())
    assert final_digest(run) == uninterrupted_digest(tmp_path, cfg)
