"""A learner process for the multi-process tests: run under ``torchrun``/``srun`` (data-parallel ranks) or
plain ``python`` (one rank). It takes ``--updates`` GRPO steps on fixed synthetic batches (batch j is
``make_groups(..., seed=j)``), optionally resuming from or saving a checkpoint, and rank 0 writes the
final parameters and each step's metrics to ``--out``."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from learner_support import advantages_of, make_groups, parameters

from wmrl.learner.config import LearnerConfig
from wmrl.learner.distributed import init_distributed, leave_rank
from wmrl.learner.follower import follow, lead
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
    parser.add_argument("--n", "--group-size", dest="n", type=int, default=4)  # torchrun takes "--n" for its own
    parser.add_argument("--gen-len", type=int, nargs=2, default=(3, 14))
    parser.add_argument("--ckpt-root", default="")
    parser.add_argument("--save-after", type=int, default=0)  # checkpoint after this many updates
    parser.add_argument("--resume", default="")  # checkpoint directory to start from
    parser.add_argument("--offload-optimizer", action="store_true")
    parser.add_argument("--offload-params", action="store_true")
    parser.add_argument("--gradient-checkpointing", action="store_true")
    # ZeRO-3: partition every parameter of the tiny model (DeepSpeed keeps small ones whole by default)
    parser.add_argument("--persistence-threshold", type=int, default=100_000)
    parser.add_argument("--bucket-mb", type=float, default=512.0)
    parser.add_argument("--loss-chunk-tokens", type=int, default=4096)
    parser.add_argument("--follow", action="store_true")  # ranks 1.. follow rank 0 instead of running the loop
    parser.add_argument("--sync-out", default="")  # where rank 0 writes the bucketed weight sync's tensors
    parser.add_argument("--group-timeout-s", type=float, default=0.0)  # the learner group's timeout (0: its default)
    parser.add_argument("--idle-s", type=float, default=0.0)  # rank 0 works alone this long between two updates
    parser.add_argument("--kill-leader-after", type=int, default=0)  # rank 0 dies (SIGKILL) after this many updates
    args = parser.parse_args()
    if args.group_timeout_s:
        init_distributed(timeout_s=args.group_timeout_s)

    cfg = LearnerConfig(loss_chunk_tokens=args.loss_chunk_tokens, lr=args.lr, optimizer=args.optimizer, zero_stage=args.zero_stage, micro_batch_size=args.micro,
                        offload_optimizer=args.offload_optimizer, offload_params=args.offload_params,
                        gradient_checkpointing=args.gradient_checkpointing,
                        zero3_persistence_threshold=args.persistence_threshold, weight_sync_bucket_mb=args.bucket_mb)
    if args.follow:  # rank 0 leads, the other ranks only repeat its calls (wmrl/learner/follower.py)
        if int(os.environ["RANK"]) != 0:
            follow(cfg)
            return
        learner = lead(cfg, args.model)
    else:
        learner = GRPOLearner(cfg, args.model)
    start = learner.load_checkpoint(args.resume) if args.resume else 0
    metrics = []
    for step in range(start + 1, args.updates + 1):
        if step > start + 1 and args.idle_s:  # what an evaluation or a long anchor turn does to the ranks
            time.sleep(args.idle_s)
        groups = make_groups(args.groups, args.n, seed=step, gen_len=tuple(args.gen_len))
        weights = np.linspace(1.0, 2.0, args.groups)
        metrics.append(learner.update(groups, advantages_of(groups, seed=step), weights / weights.sum()))
        if step == args.save_after:
            learner.save_checkpoint(args.ckpt_root, step)
        if step == args.kill_leader_after:  # between two calls, as a crashed or OOM-killed coordinator
            print("leader killed after update", step, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
    if args.sync_out:  # the weight sync's stream in bf16, from every rank's gathers, kept by rank 0
        buckets = [dict(bucket) for bucket in learner.weight_buckets(torch.bfloat16)]
        if learner.rank == 0:
            torch.save({"buckets": len(buckets), "tensors": {k: v.clone() for b in buckets for k, v in b.items()},
                        "local_numel": {n: p.data.numel() for n, p in learner.engine.module.named_parameters()}},
                       args.sync_out)
    params = parameters(learner)
    if args.follow:
        learner.release()
    if learner.rank == 0:
        torch.save(params, args.out)
        Path(args.out + ".json").write_text(json.dumps({"world_size": learner.world_size, "metrics": metrics,
                                                    "optimizer": learner.engine.basic_optimizer.defaults}))


if __name__ == "__main__":
    main()
    leave_rank(0)  # as a rank's entry point ends: no C++ teardown at exit to abort a finished rank
