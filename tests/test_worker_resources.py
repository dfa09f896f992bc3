"""What one anchor-worker array task asks Slurm for follows from what it runs: each of its slots
(``executions_per_gpu`` x ``worker_gpus``) holds one execution (``sandbox.memory_mb``, ``sandbox.threads``)
beside its own worker process and grader (``launch.worker_own_mem_mb``); a layout whose request cannot
hold that is refused when the config loads, naming the keys and the numbers."""

from __future__ import annotations

import pytest
from launch_support import REPO, dry_config

from wmrl.config import ConfigError, load_config
from wmrl.slurm.client import WORKERS, job_resources, sbatch_command_options

SCALE_9B = REPO / "configs" / "qwen3.5-9b.yaml"


def scale_config(tmp_path, *overrides: str):
    image = tmp_path / "sandbox.sif"  # Apptainer cannot run here: the image only has to exist
    image.touch()
    return load_config(SCALE_9B, [f"runs_root={tmp_path}", "tasks.root=''", f"sandbox.apptainer_image={image}",
                                  *overrides])


def mem_mb(option: str) -> int:
    assert option.endswith("MB"), option
    return int(option.removesuffix("MB"))


def test_9b_worker_task_memory_and_cpus_cover_both_executions_and_their_workers(tmp_path):
    cfg = scale_config(tmp_path)
    printed = dict(o.removeprefix("--").partition("=")[::2] for o in sbatch_command_options(cfg, WORKERS))
    slots = cfg.launch.executions_per_gpu * cfg.launch.worker_gpus
    assert slots == 2
    assert mem_mb(printed["mem"]) >= slots * (cfg.sandbox.memory_mb + cfg.launch.worker_own_mem_mb)
    assert int(printed["cpus-per-task"]) >= slots * cfg.sandbox.threads


def test_unset_worker_resources_are_derived_from_one_execution_per_slot(tmp_path):
    cfg = dry_config(tmp_path, "derived", 1, "launch.executor=slurm", "launch.worker_gpus=1",
                     "launch.executions_per_gpu=3", "sandbox.memory_mb=4000", "sandbox.threads=2",
                     "launch.worker_own_mem_mb=1000")
    assert job_resources(cfg, WORKERS)["mem"] == "15000MB"  # 3 x (4000 + 1000)
    assert job_resources(cfg, WORKERS)["cpus_per_task"] == 6  # 3 x 2


def test_explicit_worker_resources_above_the_need_are_kept(tmp_path):
    cfg = dry_config(tmp_path, "explicit", 1, "launch.executor=slurm", "launch.worker_mem_gb=16",
                     "launch.worker_cpus=4", "sandbox.memory_mb=4096", "sandbox.threads=2")
    resources = job_resources(cfg, WORKERS)
    assert (resources["mem"], resources["cpus_per_task"]) == ("16384MB", 4)


def test_worker_memory_that_cannot_hold_two_executions_is_refused_at_load(tmp_path):
    with pytest.raises(ConfigError) as err:
        scale_config(tmp_path, "launch.worker_mem_gb=64")
    message = str(err.value)
    for part in ("launch.worker_mem_gb=64", "launch.executions_per_gpu=2", "launch.worker_gpus=1",
                 "sandbox.memory_mb=49152", "102400 MB", "at least 100"):
        assert part in message, part


def test_worker_cpus_below_the_executions_threads_are_refused_at_load(tmp_path):
    with pytest.raises(ConfigError, match=r"launch.worker_cpus=8 .* 2 slots .* sandbox.threads=8 .* 16 CPUs"):
        scale_config(tmp_path, "launch.worker_cpus=8")


def test_a_worker_sbatch_mem_line_below_the_need_is_refused_at_load(tmp_path):
    with pytest.raises(ConfigError, match=r"launch.worker_sbatch.*--mem=8G.*sandbox.memory_mb=8192"):
        dry_config(tmp_path, "line", 1, "launch.executor=slurm", "launch.worker_sbatch=[--mem=8G]",
                   "sandbox.memory_mb=8192")
