"""CPU generation speed of the tiny default model (transformers backend): batch 1 and a full step's batch.

    python benchmarks/bench_generation.py [--batch 64] [--new-tokens 128] [--threads 1 2]

The prompt is a real one: the agent's chat prompt around a built-in task's overview. The model is the
tiny default's architecture at random init (what `wmrl model init` builds; SFT changes the weights,
not the cost per token), which never stops early, so every request decodes exactly --new-tokens.
Wall time and process CPU time are both recorded: on a shared machine wall time measures the
neighbours too, CPU seconds per token do not. Writes results/bench_generation.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

from wmrl.config import load_config
from wmrl.generation.base import SamplingParams
from wmrl.generation.hf import TransformersGenerator
from wmrl.models.init import ensure_tiny_model


def prompt_ids(gen: TransformersGenerator, tasks_root: str) -> list[int]:
    from wmrl.models.init import pool_root_for
    from wmrl.tasks import load_pool, task_overview

    task = load_pool(pool_root_for(tasks_root), split="train")[0]
    messages = [{"role": "system", "content": "You are an ML research agent. Reply with analysis and one Python block."},
                {"role": "user", "content": task_overview(task)}]
    text = gen.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return gen.tokenizer.encode(text, add_special_tokens=False)


def measure(gen: TransformersGenerator, ids: list[int], batch: int, new_tokens: int) -> dict:
    params = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=new_tokens, seed=0)
    gen.stop_ids = []  # decode exactly new_tokens per request
    gen.generate([ids], SamplingParams(max_new_tokens=4))  # warm-up
    wall, cpu = time.perf_counter(), time.process_time()
    out = gen.generate([ids] * batch, params)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    tokens = sum(len(g.token_ids) for g in out)
    return {"batch": batch, "prompt_tokens": len(ids), "new_tokens": tokens, "wall_s": round(wall, 3),
            "cpu_s": round(cpu, 3), "tokens_per_s_wall": round(tokens / wall, 1),
            "tokens_per_cpu_s": round(tokens / cpu, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=64, help="a full step: m * n trajectories (8 x 8)")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--out", default="results/bench_generation")
    args = parser.parse_args()

    cfg = load_config()
    path, _ = ensure_tiny_model(cfg.model, cfg.tasks.root)
    gen = TransformersGenerator.from_path(str(path), device="cpu", batch_size=args.batch)
    ids = prompt_ids(gen, cfg.tasks.root)
    rows = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        for batch in (1, args.batch):
            row = {"threads": threads, **measure(gen, ids, batch, args.new_tokens), "load_avg_1min": os.getloadavg()[0]}
            rows.append(row)
            print(json.dumps(row), flush=True)
    record = {"model": str(path), "parameters": sum(p.numel() for p in gen.model.parameters()),
              "cpus": os.cpu_count(), "rows": rows}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
    lines = ["# CPU generation, tiny default model (transformers backend)", "",
             (f"{record['parameters']:,} parameters, {record['cpus']} CPUs; prompt {rows[0]['prompt_tokens']} tokens, "
              f"{args.new_tokens} new tokens per request. Command: `python benchmarks/bench_generation.py`."), "",
             "| threads | batch | tokens/s (wall) | tokens per CPU-second | wall s | load avg (1 min) |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['threads']} | {r['batch']} | {r['tokens_per_s_wall']} | {r['tokens_per_cpu_s']} | {r['wall_s']} | "
              f"{r['load_avg_1min']:.1f} |" for r in rows]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
