"""What the launcher asks Slurm for: the sbatch options from config, the clean environment, durations."""

from __future__ import annotations

import os
import shutil

import pytest
from launch_support import dry_config, make_run

from wmrl.config import ConfigError
from wmrl.slurm.client import (
    COORDINATOR,
    WORKERS,
    clean_slurm_environment,
    parse_duration,
    sbatch_options,
    slurm_executor,
)

needs_srun = pytest.mark.skipif(shutil.which("srun") is None, reason="submitit's SlurmExecutor needs srun on PATH")

CLUSTER = ["launch.partition=gpu", "launch.account=lab42", "launch.qos=normal", "launch.worker_gpus=1",
           "launch.array_parallelism=3", "launch.workers=8", "launch.timing.worker_time_min=90",
           "launch.extra_sbatch=[--constraint=a100,'#SBATCH --exclusive']",
           "launch.setup=[module load cuda]", "launch.worker_mem_gb=16"]


def _script(tmp_path, role: str, *extra: str) -> str:
    cfg = dry_config(tmp_path, "sbatch", 1, *CLUSTER, *extra)
    executor = slurm_executor(cfg, make_run(cfg), role)
    if role == WORKERS:
        executor.parameters["map_count"] = cfg.launch.workers  # what map_array sets for an array
    return executor._make_submission_file_text("python -m submitit.core._submit X", "uid")


@needs_srun
def test_worker_array_script_carries_cluster_options_throttle_and_gpus(tmp_path):
    text = _script(tmp_path, WORKERS)
    for line in ("#SBATCH --partition=gpu", "#SBATCH --account=lab42", "#SBATCH --qos=normal",
                 "#SBATCH --array=0-7%3", "#SBATCH --gpus-per-node=1", "#SBATCH --time=90",
                 "#SBATCH --constraint=a100", "#SBATCH --exclusive", "#SBATCH --mem=16384MB", "module load cuda"):
        assert line in text.splitlines(), line


@needs_srun
def test_workers_are_signalled_with_usr1_and_the_coordinator_with_usr2_and_requeue(tmp_path):
    workers = _script(tmp_path / "w", WORKERS).splitlines()
    coordinator = _script(tmp_path / "c", COORDINATOR).splitlines()
    assert "#SBATCH --signal=USR1@120" in workers and "#SBATCH --requeue" not in workers
    assert "#SBATCH --signal=USR2@120" in coordinator and "#SBATCH --requeue" in coordinator
    assert not any(line.startswith("#SBATCH --array") for line in coordinator)


def test_sbatch_options_accept_both_spellings_and_reject_others():
    assert sbatch_options(["--constraint=a100", "#SBATCH --exclusive"]) == {"constraint": "a100", "exclusive": True}
    with pytest.raises(ConfigError, match="extra_sbatch"):
        sbatch_options(["-C a100"])


def test_bad_extra_sbatch_line_fails_at_config_load(tmp_path):
    with pytest.raises(ConfigError, match=r"launch.extra_sbatch\[0\]"):
        dry_config(tmp_path, "bad", 1, "launch.extra_sbatch=[constraint]")


def test_clean_environment_hides_the_parent_jobs_slurm_variables_and_restores_them(monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "41")
    monkeypatch.setenv("SBATCH_PARTITION", "parent")
    monkeypatch.setenv("SLURM_MEM_PER_NODE", "4096")
    with clean_slurm_environment():
        assert not [k for k in os.environ if k.startswith(("SLURM_", "SBATCH_"))]
    assert os.environ["SLURM_JOB_ID"] == "41" and os.environ["SBATCH_PARTITION"] == "parent"


@pytest.mark.parametrize(("text", "seconds"), [("30", 1800.0), ("05:00", 300.0), ("1:02:03", 3723.0),
                                               ("2-00:00:00", 172800.0), ("UNLIMITED", None)])
def test_slurm_durations_parse_to_seconds(text, seconds):
    assert parse_duration(text) == seconds
