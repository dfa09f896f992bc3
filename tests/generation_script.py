"""Data-parallel generation over learner ranks (wmrl/generation/data_parallel.py), in real processes:
run under ``torchrun`` with 2 CPU ranks over gloo. Rank 0 leads a ZeRO-3 learner and a data-parallel
transformers generator (``generation.data_parallel``, the code path of the colocated vLLM placement
with several ranks); rank 1 follows with an engine of its own. Rank 0 generates, takes one GRPO step,
syncs the weights into every rank's engine, generates again, and writes to ``--out``: each call's
generations from all ranks and what its own engine alone draws for the same requests and seeds."""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from learner_support import advantages_of, make_groups

from wmrl.generation.base import SamplingParams
from wmrl.generation.config import GenerationConfig
from wmrl.generation.data_parallel import place_on_rank
from wmrl.generation.hf import request_seeds
from wmrl.learner.config import LearnerConfig
from wmrl.learner.distributed import leave_rank
from wmrl.learner.follower import follow, lead


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    cfg = LearnerConfig(zero_stage=3, micro_batch_size=2, lr=1e-2, zero3_persistence_threshold=0)
    # batch_size 1: every request decodes alone, so one engine and a share of two draw the same numbers
    generation = GenerationConfig(backend="transformers", device="cpu", batch_size=1, data_parallel=True)
    if int(os.environ["RANK"]) != 0:
        follow(cfg, functools.partial(place_on_rank, cfg=generation, dtype="float32"))
        return
    leader = lead(cfg, args.model)
    learner, generator = place_on_rank(leader, args.model, leader.channel, generation, "float32")
    prompts = [[5 + i, 17, 42 + 3 * i, 9] for i in range(5)]  # 5 requests: shares of 3 and 2
    params = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=8, seed=7)
    seeds = request_seeds(params, len(prompts), None)

    def call() -> dict:
        every = generator.generate(prompts, params)
        alone = generator.local.generate(prompts, params, seeds)  # this rank's engine, no collective
        return {"every": [(g.token_ids, g.logprobs) for g in every], "alone": [(g.token_ids, g.logprobs) for g in alone]}

    before = call()
    groups = make_groups(3, 4, seed=1, gen_len=(3, 14))
    weights = np.full(3, 1 / 3)
    learner.update(groups, advantages_of(groups, seed=1), weights)
    generator.update_weights(learner.named_parameters())  # every rank's engine from the gathers
    after = call()
    leader.release()
    Path(args.out).write_text(json.dumps({"world_size": learner.world_size, "before": before, "after": after,
                                          "data_parallel": type(generator).__name__}))


if __name__ == "__main__":
    main()
    leave_rank(0)  # as a rank's entry point ends: no C++ teardown at exit to abort a finished rank
