"""Anchor GPU sharing: ``launch.executions_per_gpu`` worker slots on one GPU, each told its share.

The paper sizes an execution at about 40 GB; an A100-80GB or an H200 holds two. A worker holds one
execution at a time, so sharing a GPU means several worker processes (*slots*) on it: slot ``i`` of a
machine whose visible GPUs are ``g0, g1, ...`` runs on ``g[i // executions_per_gpu]``. Each slot's
environment, inherited by the sandbox (:func:`wmrl.sandbox.runspec.gpu_env`), says what it may use:

- ``CUDA_VISIBLE_DEVICES``: its one GPU;
- ``WMRL_GPU_FRACTION``: its share, ``1/executions_per_gpu``; ``WMRL_GPU_MEMORY_MB``: that share of the
  GPU's memory (from ``nvidia-smi``), for the solution to respect, e.g.
  ``torch.cuda.set_per_process_memory_fraction(float(os.environ["WMRL_GPU_FRACTION"]))``;
- ``TF_FORCE_GPU_ALLOW_GROWTH=true`` (TensorFlow otherwise takes the whole GPU at start-up) and
  ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` (less fragmentation beside a neighbour).

Nothing here enforces the memory split (CUDA has no per-process cap without MPS, which a site's admins
run; see docs/sandbox.md): a solution over its share can make its neighbour fail with out-of-memory.
The cost accounting counts each execution at its fraction: its GPU-seconds are its wall seconds times
``WMRL_GPU_FRACTION`` (the worker records ``gpu_fraction`` in the outcome).
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess

from wmrl.orchestration.config import LaunchConfig
from wmrl.sandbox.runspec import GPU_SHARE_VARS

# The sandbox passes GPU_SHARE_VARS on from the worker's environment to an execution with a GPU.
FRACTION_ENV, MEMORY_ENV = GPU_SHARE_VARS[:2]


def visible_gpus(env: dict[str, str] | None = None) -> list[str]:
    """The GPUs this process may use: ``CUDA_VISIBLE_DEVICES`` (Slurm sets it for a job's GPUs)."""
    value = (os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES", "")
    return [g.strip() for g in value.split(",") if g.strip() and g.strip() != "-1"]


def gpu_memory_mb(gpu: str) -> int | None:
    """The total memory of ``gpu`` in MiB from ``nvidia-smi``; None where it cannot tell."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "--query-gpu=memory.total", "--format=csv,noheader,nounits", "-i", gpu],
                             capture_output=True, text=True, timeout=30, check=True).stdout
        return int(float(out.strip().splitlines()[0]))
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def slots_per_task(launch: LaunchConfig) -> int:
    """Worker slots one Slurm array task runs: ``executions_per_gpu`` on each of its GPUs (1 without GPUs)."""
    return launch.executions_per_gpu * launch.worker_gpus if launch.worker_gpus > 0 else 1


def array_tasks(launch: LaunchConfig) -> int:
    """Array tasks for ``launch.workers`` concurrent executions."""
    return math.ceil(launch.workers / slots_per_task(launch))


def slot_env(slot: int, gpus: list[str], executions_per_gpu: int) -> dict[str, str]:
    """The environment of worker slot ``slot`` on a machine with ``gpus`` (nothing without GPUs)."""
    if not gpus:
        return {}
    gpu = gpus[(slot // executions_per_gpu) % len(gpus)]
    env = {"CUDA_VISIBLE_DEVICES": gpu, FRACTION_ENV: repr(1.0 / executions_per_gpu)}
    if executions_per_gpu > 1:
        env.update(TF_FORCE_GPU_ALLOW_GROWTH="true", PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")
        total = gpu_memory_mb(gpu)
        if total is not None:
            env[MEMORY_ENV] = str(total // executions_per_gpu)
    return env


def gpu_fraction() -> float | None:
    """This worker's GPU share, as its slot environment says; None for a worker without a GPU share."""
    value = os.environ.get(FRACTION_ENV)
    return float(value) if value else None
