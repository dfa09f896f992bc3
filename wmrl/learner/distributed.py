"""The learner's data-parallel process group: torchrun, ``srun`` tasks, or one plain process.

Every rank of the coordinator's allocation runs the same learner; ranks differ only in which
trajectories of a step they forward (see ``wmrl/learner/batch.py``). The group is started from
whatever launched the processes:

- ``torchrun`` (or any launcher) already exported ``RANK``/``WORLD_SIZE``/``MASTER_ADDR``/``MASTER_PORT``;
- ``srun`` tasks of a Slurm step (``SLURM_NTASKS`` > 1): derived from the allocation (:func:`slurm_rendezvous`):
  rank = ``SLURM_PROCID``, the master is the first host of ``SLURM_JOB_NODELIST`` (Slurm's node-list
  syntax parsed here, :func:`expand_nodelist`: no Slurm client needed), the port a function of the job
  and step ids, so every task computes the same address without talking to the others, and a requeued
  job (same id) finds it again;
- a lone process: rank 0 of a world of 1 on a free loopback port it picks itself.

A lone process never trusts inherited ``MASTER_ADDR``/``MASTER_PORT``/``RANK``: a child of a process
that ran a learner (a pytest run, a ``wmrl`` command started from a notebook, an ``sbatch`` that
exported a login shell's variables) inherits them, and the port may still be bound by the parent's
store, so ``init_process_group`` would fail with EADDRINUSE or join a stranger's group. The
variables are trusted only when they describe several processes (``WORLD_SIZE`` > 1) or torchrun's
agent hosts the store (``TORCHELASTIC_USE_AGENT_STORE``, a one-process torchrun).

The backend is gloo on CPU and nccl on GPUs, chosen by DeepSpeed's accelerator.
"""

from __future__ import annotations

import atexit
import os
import socket
import subprocess
import sys
import zlib
from collections.abc import Mapping
from datetime import timedelta
from typing import NoReturn

import torch
import torch.distributed as dist

from wmrl.learner.devices import rank_device_index, visible_gpus

# Before ``import deepspeed``: without a GPU it would probe for accelerators and warn; with this it
# takes its CPU accelerator (gloo) directly. With CUDA it detects the GPU itself; an explicit
# DS_ACCELERATOR always wins.
if not torch.cuda.is_available():
    os.environ.setdefault("DS_ACCELERATOR", "cpu")

_ENV_KEYS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _launched_group() -> bool:
    """The ``env://`` variables come from a launcher of this group (not inherited by a lone process)."""
    if not all(key in os.environ for key in _ENV_KEYS):
        return False
    return int(os.environ["WORLD_SIZE"]) > 1 or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"


def _export_environment() -> str:
    """Make the ``env://`` variables exist; returns which launcher they came from."""
    if _launched_group():
        os.environ.setdefault("LOCAL_RANK", "0")
        return "env"
    if int(os.environ.get("SLURM_NTASKS", "1")) > 1 and "SLURM_PROCID" in os.environ:
        # Ranks bind devices by LOCAL_RANK (DeepSpeed does), so CUDA_VISIBLE_DEVICES stays whole.
        os.environ.update(slurm_rendezvous(os.environ))
        return "slurm"
    os.environ.update(
        {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
         "MASTER_PORT": str(_free_port())}
    )
    return "single"


MASTER_PORT_RANGE = (20000, 60000)


def expand_nodelist(nodelist: str) -> list[str]:
    """A Slurm node list's host names in Slurm's order, as ``scontrol show hostnames`` prints them:
    ``gpu[03-05,07],login1`` -> gpu03 gpu04 gpu05 gpu07 login1; a range keeps its start's zero padding
    (``n[098-101]`` -> n098 .. n101), several brackets multiply (``r[1-2]-n[1-2]`` -> r1-n1 r1-n2 r2-n1 ..).
    Raises ValueError on what is not that syntax."""
    hosts: list[str] = []
    for item in _top_level_items(nodelist):
        hosts.extend(_expand_item(item, nodelist))
    return hosts


def _top_level_items(nodelist: str) -> list[str]:
    """``nodelist`` split at the commas outside brackets."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(nodelist):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if depth not in (0, 1):
            raise ValueError(f"node list {nodelist!r}: unbalanced or nested brackets")
        if char == "," and depth == 0:
            items.append(nodelist[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"node list {nodelist!r}: unclosed bracket")
    items.append(nodelist[start:])
    if not all(items):
        raise ValueError(f"node list {nodelist!r}: an empty host name")
    return items


def _expand_item(item: str, nodelist: str) -> list[str]:
    """One host expression (no top-level comma): the first bracket's values times the rest's expansion."""
    if "[" not in item:
        if "]" in item:
            raise ValueError(f"node list {nodelist!r}: unbalanced brackets")
        return [item]
    prefix, _, tail = item.partition("[")
    body, _, rest = tail.partition("]")
    values: list[str] = []
    for part in body.split(","):
        low, dash, high = part.partition("-")
        if not (low.isdigit() and (not dash or high.isdigit())):
            raise ValueError(f"node list {nodelist!r}: {part!r} is not a number or a range of numbers")
        if not dash:
            values.append(low)
            continue
        if int(high) < int(low):
            raise ValueError(f"node list {nodelist!r}: the range {part!r} runs backwards")
        values.extend(f"{n:0{len(low)}d}" for n in range(int(low), int(high) + 1))
    return [prefix + value + after for value in values for after in _expand_item(rest, nodelist)] if rest \
        else [prefix + value for value in values]


def first_host(nodelist: str) -> str:
    """The first host name of a Slurm node list (``gpu[03-05,07],login1`` -> ``gpu03``), parsed here:
    the learner image has no Slurm client. ``scontrol show hostnames`` only for a list the parser refuses."""
    try:
        return expand_nodelist(nodelist)[0]
    except ValueError as parse_error:
        refused = parse_error
    try:
        out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True,
                             timeout=30, check=True).stdout.split()
    except (OSError, subprocess.SubprocessError) as err:
        raise RuntimeError(f"{refused}, and scontrol show hostnames {nodelist!r} failed ({err}): cannot find the "
                           "learner's master host of this Slurm allocation") from err
    if not out:
        raise RuntimeError(f"scontrol show hostnames {nodelist!r} listed no host")
    return out[0]


def slurm_rendezvous(env: Mapping[str, str]) -> dict[str, str]:
    """The ``env://`` variables of this Slurm task's learner group, from the allocation alone."""
    job, step = env["SLURM_JOB_ID"], env.get("SLURM_STEP_ID", "0")
    low, high = MASTER_PORT_RANGE
    port = low + zlib.crc32(f"{job}.{step}".encode()) % (high - low)
    return {
        "RANK": env["SLURM_PROCID"], "WORLD_SIZE": env["SLURM_NTASKS"],
        # DeepSpeed binds CUDA index LOCAL_RANK: the task's own GPU is index 0 in it (wmrl/learner/devices.py).
        "LOCAL_RANK": str(rank_device_index(int(env.get("SLURM_LOCALID", "0")), visible_gpus(env))),
        "MASTER_ADDR": first_host(env.get("SLURM_STEP_NODELIST") or env["SLURM_JOB_NODELIST"]),
        "MASTER_PORT": str(port),
    }


def _skip_shm_comm_build() -> None:
    """Keep DeepSpeed from JIT-compiling its shared-memory CPU all-reduce op at start-up.

    That op only serves ``inference_all_reduce`` (tensor-parallel inference); training collectives
    go through torch.distributed (gloo) either way. Building it costs minutes on a fresh machine.
    """
    import deepspeed.ops

    compatible = deepspeed.ops.__compatible_ops__  # a cached dict; DeepSpeed reads this very object
    compatible["deepspeed_shm_comm"] = False


def init_distributed(timeout_s: float = 1800.0) -> tuple[int, int]:
    """Start (once) the process group every learner rank joins; returns ``(rank, world_size)``."""
    if not dist.is_initialized():
        import deepspeed
        from deepspeed.accelerator import get_accelerator

        _export_environment()
        _skip_shm_comm_build()
        deepspeed.init_distributed(
            dist_backend=get_accelerator().communication_backend_name(),
            timeout=timedelta(seconds=timeout_s),
        )
        atexit.register(_destroy_at_exit)  # only the group wmrl started: one the caller made is theirs
    return dist.get_rank(), dist.get_world_size()


def _destroy_at_exit() -> None:
    """Tear the process group wmrl started down before the interpreter finalizes (the followers do it
    when released, wmrl/learner/follower.py). Not enough on its own against the abort at exit that
    :func:`leave_rank` describes: a rank's entry point ends with that."""
    if dist.is_initialized():
        dist.destroy_process_group()


def leave_rank(code: int = 0) -> NoReturn:
    """End a learner rank's process once its work is done and written: tear the process group down,
    flush Python's streams and log handlers, and exit with ``code`` without the C++ static destructors.

    Even after the group is destroyed (``_destroy_at_exit``), torch's and gloo's objects that live to
    the interpreter's finalization can abort a rank there (SIGABRT, "terminate called without an
    active exception", no Python frame: seen on rank 0 or 1 of about one 2-rank run in fifteen in CI),
    which turns a finished rank into a failed task. Only for a rank's own entry point, after its last
    line: nothing after this runs (not even other atexit handlers)."""
    import logging

    _destroy_at_exit()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing left to say
            pass
    os._exit(code)


def all_reduce(values: torch.Tensor, op: str = "sum") -> torch.Tensor:
    """``values`` reduced over the ranks (in place and returned); a no-op in a world of one."""
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(values, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
    return values


def barrier() -> None:
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()
