"""Learner checkpoints: model, optimizer, reference pointer and RNG at a step boundary, exactly resumable.

::

    RUN_DIR/checkpoints/learner/
      step-00000012/
        mp_rank_00_model_states.pt, zero_pp_rank_*_optim_states.pt   DeepSpeed's files (every rank's)
        rng-rank-00000.pt ...        each rank's torch / numpy / python RNG states
        hf/                          config.json + tokenizer files of the initial model (for export)
        learner.json                 step, updates, reference model path, zero stage, world size; written last

Every rank writes into ``.tmp-step-00000012`` (a name all ranks agree on); after a barrier rank 0
writes ``learner.json`` and renames the directory into place, so a directory named ``step-*`` with a
``learner.json`` is whole, and a crash at any point leaves the previous one as the newest. The
reference policy (the frozen initial model) is never copied: ``learner.json`` points at it.
Rank 0 then prunes to the newest ``learner.keep_checkpoints``; only ``step-*`` directories with a
``learner.json`` (made here) and stale ``.tmp-step-*`` directories are ever deleted.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
import uuid
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from wmrl.io import TMP_PREFIX, fsync_dir, read_json, step_name
from wmrl.learner.config import LearnerConfig
from wmrl.learner.distributed import barrier


class CheckpointedLearner(Protocol):
    """What a checkpoint saves and restores of a learner (:class:`~wmrl.learner.grpo.GRPOLearner` is one)."""

    cfg: LearnerConfig
    engine: Any  # the DeepSpeed engine: model, optimizer, scheduler
    model_path: Path  # the reference model the learner was built from
    rank: int
    world_size: int
    updates: int

META = "learner.json"
HF_FILES = (
    "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
    "special_tokens_map.json", "added_tokens.json", "vocab.json", "merges.txt", "chat_template.jinja",
)
STALE_TMP_S = 3600.0  # a temp checkpoint untouched this long belongs to a dead writer


def _rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
                             "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _fsync_tree(root: Path) -> None:
    for path in sorted(root.rglob("*")):
        if path.is_file():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
    for directory in [root, *(p for p in root.rglob("*") if p.is_dir())]:
        fsync_dir(directory)


def save(learner: CheckpointedLearner, root: Path, step: int) -> Path:
    """Write the checkpoint of step ``step``; every rank calls this. Returns the final directory."""
    final = root / step_name(step)
    tmp = root / f"{TMP_PREFIX}{final.name}"
    if learner.rank == 0:
        root.mkdir(parents=True, exist_ok=True)
        if tmp.exists():  # a writer of this very step died before its rename
            shutil.rmtree(tmp)
        tmp.mkdir()
    barrier()
    learner.engine.save_checkpoint(str(root), tag=tmp.name, client_state={"updates": learner.updates},
                                   save_latest=False)
    torch.save(_rng_state(), tmp / f"rng-rank-{learner.rank:05d}.pt")
    barrier()
    if learner.rank == 0:
        hf = tmp / "hf"
        hf.mkdir()
        for name in HF_FILES:
            if (learner.model_path / name).is_file():
                shutil.copy2(learner.model_path / name, hf / name)
        meta = {
            "step": step, "updates": learner.updates, "reference_model": str(learner.model_path),
            "zero_stage": learner.cfg.zero_stage, "precision": learner.cfg.precision,
            "world_size": learner.world_size, "written_at": time.time(),
            "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        }
        (tmp / META).write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
        _fsync_tree(tmp)
        if final.exists():  # the same step saved again after a resume: swap, then drop the old copy
            old = root / f"{TMP_PREFIX}{final.name}-old-{uuid.uuid4().hex[:8]}"
            os.rename(final, old)
            os.rename(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, final)
        fsync_dir(root)
        prune(root, learner.cfg.keep_checkpoints)
    barrier()
    return final


def load(learner: CheckpointedLearner, path: Path) -> int:
    """Restore ``learner`` from checkpoint directory ``path``; every rank calls this. Returns the step."""
    meta = read_meta(path)
    if Path(meta["reference_model"]) != learner.model_path:
        raise ValueError(
            f"{path / META}: trained from reference model {meta['reference_model']}, but this learner "
            f"was built from {learner.model_path}; build it from the checkpoint's reference model"
        )
    if meta["world_size"] != learner.world_size and meta["zero_stage"] > 0:
        raise ValueError(
            f"{path}: saved by {meta['world_size']} ranks with ZeRO stage {meta['zero_stage']} "
            f"(optimizer state partitioned per rank); resume it with {meta['world_size']} ranks"
        )
    load_path, client = learner.engine.load_checkpoint(
        str(path.parent), tag=path.name, load_optimizer_states=True, load_lr_scheduler_states=False,
        load_module_strict=True,
    )
    if load_path is None:
        raise ValueError(f"{path}: DeepSpeed found no checkpoint to load")
    learner.updates = int(client["updates"])
    rng = path / f"rng-rank-{learner.rank:05d}.pt"
    if rng.is_file():
        _set_rng_state(torch.load(rng, weights_only=False))
    return int(meta["step"])


def read_meta(path: Path) -> dict[str, Any]:
    try:
        meta = read_json(path / META)
    except (OSError, ValueError) as err:
        raise ValueError(f"{path}: not a complete learner checkpoint (no readable {META}: {err})") from err
    missing = {"step", "updates", "reference_model", "zero_stage", "world_size"} - set(meta)
    if missing:
        raise ValueError(f"{path / META}: missing {', '.join(sorted(missing))}")
    return meta


def complete_checkpoints(root: Path) -> list[Path]:
    """Whole checkpoints under ``root``, oldest first."""
    if not root.is_dir():
        return []
    return sorted(p for p in root.glob("step-*") if p.is_dir() and (p / META).is_file())


def latest(root: Path) -> Path | None:
    found = complete_checkpoints(root)
    return found[-1] if found else None


def prune(root: Path, keep: int) -> list[Path]:
    """Delete all but the newest ``keep`` whole checkpoints, and dead writers' temp directories."""
    removed = complete_checkpoints(root)[:-keep]
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    for leftover in root.glob(f"{TMP_PREFIX}step-*"):
        if time.time() - leftover.stat().st_mtime > STALE_TMP_S:
            shutil.rmtree(leftover, ignore_errors=True)
            removed.append(leftover)
    return removed

