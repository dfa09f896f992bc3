"""A learner process for the multi-process tests: run under ``torchrun``/``srun`` (data-parallel ranks) or
plain ``python`` (one rank). It takes ``--updates`` GRPO steps on fixed synthetic batches (batch j is
``make_groups(..., seed=j)``), optionally resuming from or saving a checkpoint, and rank 0 writes the
final parameters and each step's metrics to ``--out``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from learner_support import advantages_of, make_groups, parameters

from wmrl.learner.config import LearnerConfig
from wmrl.learner.grpo import GRPOLearner


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--zero-stage", type=int, default=2)
    parser.add_argument("--micro", type=int, default=2)
    parser.add_argument("--optimizer", default="adamw")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--updates", type=int, default=1)
    parser.add_argument("--groups", type=int, default=3)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--gen-len", type=int, nargs=2, default=(3, 14))
    parser.add_argument("--ckpt-root", default="")
    parser.add_argument("--save-after", type=int, default=0)  # checkpoint after this many updates
    parser.add_argument("--resume", default="")  # checkpoint directory to start from
    args = parser.parse_args()

    cfg = LearnerConfig(lr=args.lr, optimizer=args.optimizer, zero_stage=args.zero_stage, micro_batch_size=args.micro)
    learner = GRPOLearner(cfg, args.model)
    start = learner.load_checkpoint(args.resume) if args.resume else 0
    metrics = []
    for step in range(start + 1, args.updates + 1):
        groups = make_groups(args.groups, args.n, seed=step, gen_len=tuple(args.gen_len))
        weights = np.linspace(1.0, 2.0, args.groups)
        metrics.append(learner.update(groups, advantages_of(groups, seed=step), weights / weights.sum()))
        if step == args.save_after:
            learner.save_checkpoint(args.ckpt_root, step)
    params = parameters(learner)
    if learner.rank == 0:
        torch.save(params, args.out)
        Path(args.out + ".json").write_text(json.dumps({"world_size": learner.world_size, "metrics": metrics}))


if __name__ == "__main__":
    main()
