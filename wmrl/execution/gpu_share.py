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

Without MPS nothing enforces the split (CUDA has no per-process cap): a solution over its share can make
its neighbour fail with out-of-memory. With ``launch.mps`` (``own``: the array task starts an MPS control
daemon of its own, :func:`mps_daemon`; ``site``: the site runs one) each slot is also an MPS client with
its share as hard limits: ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` (memory, of its device 0) and
``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` (SMs); ``CUDA_MPS_PIPE_DIRECTORY`` says where the daemon listens.
The cost accounting counts each execution at its fraction: its GPU-seconds are its wall seconds times
``WMRL_GPU_FRACTION`` (the worker records ``gpu_fraction`` in the outcome).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

from wmrl.execution.config import LaunchConfig
from wmrl.sandbox.runspec import GPU_SHARE_VARS

# The sandbox passes GPU_SHARE_VARS on from the worker's environment to an execution with a GPU.
FRACTION_ENV, MEMORY_ENV = GPU_SHARE_VARS[:2]
MPS_PIPE_ENV, MPS_LOG_ENV = "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY"
MPS_CONTROL = "nvidia-cuda-mps-control"

log = logging.getLogger(__name__)


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
    return launch.worker_slots()


def array_tasks(launch: LaunchConfig) -> int:
    """Array tasks for ``launch.workers`` concurrent executions."""
    return math.ceil(launch.workers / slots_per_task(launch))


def slot_env(slot: int, gpus: list[str], executions_per_gpu: int, mps: bool = False) -> dict[str, str]:
    """The environment of worker slot ``slot`` on a machine with ``gpus`` (nothing without GPUs);
    ``mps``: the slot is an MPS client whose share is enforced."""
    if not gpus:
        return {}
    gpu = gpus[(slot // executions_per_gpu) % len(gpus)]
    env = {"CUDA_VISIBLE_DEVICES": gpu, FRACTION_ENV: repr(1.0 / executions_per_gpu)}
    if executions_per_gpu > 1:
        env.update(TF_FORCE_GPU_ALLOW_GROWTH="true", PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")
        total = gpu_memory_mb(gpu)
        if total is not None:
            env[MEMORY_ENV] = str(total // executions_per_gpu)
        if mps:  # the client sees its one GPU as device 0
            env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(100 // executions_per_gpu)
            if total is not None:
                env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={total // executions_per_gpu}M"
    return env


@contextlib.contextmanager
def mps_daemon(directory: Path) -> Iterator[dict[str, str]]:
    """An MPS control daemon for this array task's GPUs (those of its ``CUDA_VISIBLE_DEVICES``), its pipe
    and log directories under ``directory`` (node-local); yields the environment its clients need and
    tells it to quit at the end (it stops its server once the last client has gone)."""
    exe = shutil.which(MPS_CONTROL)
    if exe is None:
        raise RuntimeError(f"launch.mps=own: {MPS_CONTROL} is not on PATH on {os.uname().nodename} (it comes "
                           "with the NVIDIA driver); use launch.mps=site where the site runs MPS, or off")
    env = {MPS_PIPE_ENV: str(directory / "pipe"), MPS_LOG_ENV: str(directory / "log")}
    for path in env.values():
        Path(path).mkdir(parents=True, exist_ok=True)
    daemon_env = {**os.environ, **env}
    subprocess.run([exe, "-d"], env=daemon_env, check=True, timeout=60)
    log.info("MPS control daemon started for GPUs %s (pipe %s)", os.environ.get("CUDA_VISIBLE_DEVICES"),
             env[MPS_PIPE_ENV])
    try:
        yield env
    finally:
        done = subprocess.run([exe], input="quit\n", env=daemon_env, text=True, capture_output=True, timeout=60,
                              check=False)
        if done.returncode != 0:
            log.warning("MPS control daemon did not quit cleanly (rc %d): %s", done.returncode, done.stderr.strip())


def gpu_fraction() -> float | None:
    """This worker's GPU share, as its slot environment says; None for a worker without a GPU share."""
    value = os.environ.get(FRACTION_ENV)
    return float(value) if value else None
