"""Which GPU a learner rank uses, and what a process it starts must see to run on that GPU.

Slurm hands GPUs to a task in one of two ways, both seen in ``CUDA_VISIBLE_DEVICES`` (the local
cluster's stand-in GPUs do the same):

- the node's GPUs shared by its tasks (``--gpus-per-node``, how ``wmrl launch`` submits): every task sees
  all of them (``0,1``) and ``LOCAL_RANK`` (``SLURM_LOCALID``) picks one;
- each task its own (``--gpus-per-task=1``, or cgroups that constrain devices): task 1 sees one GPU
  (``1``, or ``0`` under cgroups), which is CUDA index 0 in it, whatever its ``LOCAL_RANK``.

DeepSpeed binds the rank to CUDA index ``LOCAL_RANK`` (``set_device``, and the process group's
``device_id``), so the learner's ``LOCAL_RANK`` is :func:`rank_device_index`. A process the rank starts
(vLLM's engine core in the colocated placement) picks its own CUDA index 0, so it must be started with
``CUDA_VISIBLE_DEVICES`` narrowed to the rank's physical GPU (:func:`physical_gpus`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def visible_gpus(env: Mapping[str, str]) -> list[str] | None:
    """The entries of ``CUDA_VISIBLE_DEVICES`` (indices or UUIDs); None when unset (every GPU visible)."""
    value = env.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    return [entry.strip() for entry in value.split(",") if entry.strip()]


def rank_device_index(local_rank: int, visible: Sequence[str] | None) -> int:
    """The CUDA index, in this process, of the GPU of the rank with ``local_rank`` on its node."""
    if visible is None or not visible or local_rank < len(visible):
        return local_rank  # the node's GPUs shared by its tasks (or no GPU at all: nothing binds)
    if len(visible) == 1:
        return 0  # the task's own GPU
    raise ValueError(f"local rank {local_rank} sees {len(visible)} GPUs (CUDA_VISIBLE_DEVICES="
                     f"{','.join(visible)}): give each task one GPU (--gpus-per-task=1) or every task all the "
                     "node's GPUs (--gpus-per-node), with as many GPUs as tasks per node")


def physical_gpus(indices: Sequence[int], visible: Sequence[str] | None) -> list[str]:
    """``CUDA_VISIBLE_DEVICES`` entries for a child process that must run on this process's CUDA ``indices``."""
    if visible is None:
        return [str(i) for i in indices]
    if max(indices, default=-1) >= len(visible):
        raise ValueError(f"CUDA index {max(indices)} is not among the {len(visible)} visible GPUs "
                         f"(CUDA_VISIBLE_DEVICES={','.join(visible)})")
    return [visible[i] for i in indices]
