"""World-model seconds per step, prefilling every check's prompt whole (before) against sharing the prefix.

    nice -n 19 python benchmarks/bench_world_model.py [--model DIR] [--trajectories 28] [--threads 1 2]

One step-equivalent is what the tiny default's world model scores in a step: 28 trajectories (7 groups
of 4, one task per group) x the 3 configured checks, through the real WorldModelEnvironment (pre-check
on) and InProcessBackend, with the default's world_model settings (short prompts, greedy, 96 new
tokens). The submissions are the training tasks' reference solutions (4 per task), so the prompts have
their real lengths. --model is the world model (the SFT'd default when given); without it the tiny
default's architecture at random init with its real tokenizer (`wmrl model init`), which never stops
early, so every answer decodes the full 96 tokens (an SFT'd model stops after its JSON: a smaller
decoding share, a larger saving). Before = the plain transformers generator (generation.batch_size);
after = world_model.share_prefixes (wmrl/generation/shared_prefix.py). Both orders alternate; the
verdict JSON of every submission is compared between the two. Process CPU seconds are the measure on
a shared machine (wall seconds count the neighbours too). Writes results/bench_world_model.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

from wmrl.config import load_config
from wmrl.configs import TINY_CONFIG
from wmrl.generation.hf import TransformersGenerator
from wmrl.generation.shared_prefix import sharing_prefixes
from wmrl.models.init import ensure_tiny_model, pool_root_for
from wmrl.rollout import Submission
from wmrl.sandbox.probe import table_runtime
from wmrl.tasks import load_pool
from wmrl.world_model.backends import InProcessBackend
from wmrl.world_model.env import TaskCase, WorldModelEnvironment


def step_submissions(tasks: list, trajectories: int, group_size: int = 4) -> list[Submission]:
    subs = []
    for g, task in enumerate(tasks[: -(-trajectories // group_size)]):
        for k, ref in enumerate(task.reference_solutions()[:group_size]):
            subs.append(Submission(f"0/{g}/{k}/0", task.task_id, ref.code))
    return subs[:trajectories]


def verdict_json(feedbacks: list) -> list[str]:
    return [json.dumps({"key": f.key, "score": f.score, "valid": f.valid, "status": f.status, "text": f.text,
                        "tokens": f.tokens, "details": f.details}, sort_keys=True) for f in feedbacks]


def measure(env: WorldModelEnvironment, subs: list[Submission]) -> tuple[dict, list[str]]:
    calls = env.counts["calls"]
    wall, cpu = time.perf_counter(), time.process_time()
    feedbacks = env.evaluate(subs)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    calls = env.counts["calls"] - calls
    return ({"calls": calls, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
             "calls_per_s_wall": round(calls / wall, 2), "calls_per_cpu_s": round(calls / cpu, 2),
             "load_avg_1min": round(os.getloadavg()[0], 1)}, verdict_json(feedbacks))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="", help="world model directory (default: the tiny default at random init)")
    parser.add_argument("--trajectories", type=int, default=28, help="scored by the world model per step")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--new-tokens", type=int, default=0,
                        help="world_model.max_new_tokens (default: the tiny config's 96); fewer stands for an SFT'd "
                             "model's answers, which stop after their JSON")
    parser.add_argument("--out", default="results/bench_world_model")
    args = parser.parse_args()

    cfg = load_config(TINY_CONFIG)  # the default run's world model: 3 checks, 96 new tokens, short prompts
    wm = cfg.world_model
    wm.max_new_tokens = args.new_tokens or wm.max_new_tokens
    model = args.model or str(ensure_tiny_model(cfg.model, cfg.tasks.root)[0])
    plain = TransformersGenerator.from_path(model, device="cpu", batch_size=cfg.generation.batch_size)
    variants = {"before": plain, "after": sharing_prefixes(plain, wm.batch_size)}
    every = load_pool(pool_root_for(cfg.tasks.root), "all")
    cases = {t.task_id: TaskCase.from_task(t) for t in every}
    subs = step_submissions([t for t in every if t.split == "train"], args.trajectories)
    envs = {name: WorldModelEnvironment(InProcessBackend(gen, wm.max_new_tokens, wm.temperature, wm.seed), cases,
                                        wm, table_runtime(), cfg.sandbox.timeout_s, cfg.sandbox.gpus)
            for name, gen in variants.items()}
    before = envs["before"]
    prompt_tokens = [len(before.backend.render(m)) for s in subs for m in before.messages(s.task_id, s.code)]
    for env in envs.values():
        env.evaluate(subs[:2])  # warm-up
    rows, answers = [], {}
    for threads in args.threads:
        torch.set_num_threads(threads)
        for repeat in range(args.repeats):
            for name in (("before", "after") if repeat % 2 == 0 else ("after", "before")):
                row, answers[name] = measure(envs[name], subs)
                rows.append({"variant": name, "threads": threads, "repeat": repeat, **row})
                print(json.dumps(rows[-1]), flush=True)
    identical = answers["before"] == answers["after"]

    def mean(name: str, threads: int, key: str) -> float:
        values = [r[key] for r in rows if r["variant"] == name and r["threads"] == threads]
        return sum(values) / len(values)

    summary = [{"threads": t, "cpu_s_before": round(mean("before", t, "cpu_s"), 2),
                "cpu_s_after": round(mean("after", t, "cpu_s"), 2),
                "cpu_speedup": round(mean("before", t, "cpu_s") / mean("after", t, "cpu_s"), 2),
                "wall_s_before": round(mean("before", t, "wall_s"), 2),
                "wall_s_after": round(mean("after", t, "wall_s"), 2),
                "wall_speedup": round(mean("before", t, "wall_s") / mean("after", t, "wall_s"), 2)}
               for t in args.threads]
    record = {"model": model, "random_init": not args.model, "trajectories": len(subs),
              "checks": list(wm.checks), "calls_per_step": rows[0]["calls"], "max_new_tokens": wm.max_new_tokens,
              "prompt_tokens_mean": round(sum(prompt_tokens) / len(prompt_tokens), 1),
              "prompt_tokens_total": sum(prompt_tokens), "generation_batch_size": cfg.generation.batch_size,
              "world_model_batch_size": wm.batch_size, "identical_verdict_json": identical,
              "cpus": os.cpu_count(),
              "rows": rows, "summary": summary}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
    which = (f"`{model}`" if args.model
             else "the tiny default's architecture at random init (real tokenizer; no early stop)")
    lines = ["# World model seconds per step: shared prefix (after) vs every prompt prefilled whole (before)", "",
             (f"One step-equivalent: {len(subs)} trajectories x {len(wm.checks)} checks ({', '.join(wm.checks)}) = "
              f"{rows[0]['calls']} calls through WorldModelEnvironment + InProcessBackend, greedy, {wm.max_new_tokens} "
              f"new tokens; prompts {record['prompt_tokens_mean']:.0f} tokens on average "
              f"({record['prompt_tokens_total']} in all). Model: {which}. {record['cpus']} CPUs, a shared machine "
              f"(load average in the table). Command: `nice -n 19 python benchmarks/bench_world_model.py`."), "",
             f"Verdict JSON of every submission identical before and after: **{identical}**.", "",
             ("| torch threads | CPU s/step before | CPU s/step after | CPU speed-up | wall s/step before | "
             "wall s/step after | wall speed-up |"), "|---|---|---|---|---|---|---|"]
    lines += [f"| {s['threads']} | {s['cpu_s_before']} | {s['cpu_s_after']} | **{s['cpu_speedup']}x** | "
              f"{s['wall_s_before']} | {s['wall_s_after']} | {s['wall_speedup']}x |" for s in summary]
    lines += ["", ("| variant | threads | repeat | calls | CPU s | wall s | calls per CPU-s | calls/s (wall) "
              "| load avg |"), "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['variant']} | {r['threads']} | {r['repeat']} | {r['calls']} | {r['cpu_s']} | {r['wall_s']} | "
              f"{r['calls_per_cpu_s']} | {r['calls_per_s_wall']} | {r['load_avg_1min']} |" for r in rows]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(out.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
