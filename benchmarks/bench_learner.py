"""Benchmark: seconds and peak memory of one learner update at the tiny default's shapes, 1 vs 2 ranks.

The model is a random-init ``Qwen3ForCausalLM`` of the tiny default's size (``model.tiny``: vocab 6144,
hidden 256, 4 layers); a step is 16 trajectories of ~1.5k tokens (a 1000-token prompt, then two turns
of ~200 generated tokens with a 100-token observation between them), trained with the learner's
defaults (AdamW, KL to the reference, entropy bonus, ZeRO-2). Each configuration runs in fresh
processes (``torchrun`` for 2 ranks, gloo); the 2 CPU cores are split between the ranks
(``OMP_NUM_THREADS``), so 2 ranks measure the data-parallel overhead, not a speed-up.

    python benchmarks/bench_learner.py [--updates 3] [--warmup 1] [--trajectories 16] [--configs 1x2,2x2,1x1]

(``RxM`` = R ranks, micro-batches of M trajectories.)

Writes results/bench_learner.json and results/bench_learner.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "results"
LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def build_model(out: Path) -> int:
    """The tiny default's architecture, random init (no tokenizer needed by the learner)."""
    import torch
    from transformers import Qwen3ForCausalLM

    from wmrl.models.config import TinyModelConfig
    from wmrl.models.init import qwen3_config

    config = qwen3_config(TinyModelConfig(), SimpleNamespace(eos_token_id=1, pad_token_id=0))
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config)
    model.save_pretrained(str(out))
    return sum(p.numel() for p in model.parameters())


def make_step(seed: int, trajectories: int, vocab: int) -> tuple[list, Any, Any]:
    import numpy as np

    from wmrl.rollout import WORLD_MODEL, Trajectory, Turn

    rng = np.random.default_rng(seed)
    n = 8
    groups = []
    for k in range(trajectories // n):
        group = []
        for i in range(n):
            traj = Trajectory(task_id=f"t{k}", group=k, index=i, role=WORLD_MODEL)
            for prompt_len in (1000, 100):
                gen = int(rng.integers(150, 250))
                traj.turns.append(Turn(
                    prompt_ids=rng.integers(3, vocab, prompt_len).tolist(),
                    generated_ids=rng.integers(3, vocab, gen).tolist(),
                    logprobs=(-rng.uniform(5, 10, gen)).tolist(), text="", code=None, parse_error=None,
                ))
            group.append(traj)
        groups.append(group)
    r = rng.uniform(0, 1, (len(groups), n))
    return groups, r - r.mean(axis=1, keepdims=True), np.full(len(groups), 1.0 / len(groups))


def worker(args: argparse.Namespace) -> None:
    """One rank: warm-up update, then ``--updates`` timed ones; rank 0 writes the numbers."""
    from wmrl.learner.config import LearnerConfig
    from wmrl.learner.grpo import GRPOLearner

    learner = GRPOLearner(LearnerConfig(lr=1e-5, micro_batch_size=args.micro), args.model)
    vocab = learner.engine.module.config.vocab_size
    for _ in range(args.warmup):
        learner.update(*make_step(0, args.trajectories, vocab))
    runs = [learner.update(*make_step(s, args.trajectories, vocab)) for s in range(1, args.updates + 1)]
    if learner.rank == 0:
        Path(args.out).write_text(json.dumps(runs))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def measure(model: Path, ranks: int, micro: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    out = tmp / f"r{ranks}-m{micro}.json"
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS=str(max(1, (os.cpu_count() or 2) // ranks)))
    launcher = [sys.executable]
    if ranks > 1:
        launcher += ["-m", "torch.distributed.run", f"--nproc_per_node={ranks}", f"--master_port={_free_port()}"]
    cmd = [*launcher, __file__, "--worker", "--model", str(model), "--out", str(out), "--micro", str(micro),
           "--updates", str(args.updates), "--warmup", str(args.warmup), "--trajectories", str(args.trajectories)]
    started = time.monotonic()
    subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
    runs = json.loads(out.read_text())
    secs = [r["learner/seconds"] for r in runs]
    return {
        "ranks": ranks, "micro_batch_size": micro, "updates": len(runs),
        "seconds_per_update": sum(secs) / len(secs), "seconds_min": min(secs), "seconds_max": max(secs),
        "peak_memory_mb_rank0": max(r["learner/peak_memory_mb"] for r in runs),
        "tokens_per_update": sum(r["learner/tokens"] for r in runs) / len(runs),
        "process_wall_s": time.monotonic() - started,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--trajectories", type=int, default=16)
    parser.add_argument("--configs", default="1x2,2x2,1x1", help="RANKSxMICRO_BATCH, comma-separated")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", default="", help=argparse.SUPPRESS)
    parser.add_argument("--out", default="", help=argparse.SUPPRESS)
    parser.add_argument("--micro", type=int, default=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        n_params = build_model(tmp / "model")
        configs = [tuple(int(v) for v in c.split("x")) for c in args.configs.split(",")]
        rows = [measure(tmp / "model", ranks, micro, args, tmp) for ranks, micro in configs]
    load = os.getloadavg()
    report = {
        "model": "random-init Qwen3ForCausalLM, model.tiny defaults", "parameters": n_params,
        "trajectories": args.trajectories, "tokens_per_trajectory": "~1.5k (1000 prompt + 2 x ~200 generated + 100)",
        "learner": "AdamW, kl_coef 0.04 (reference forward), entropy 0.002, ZeRO-2, fp32, CPU, gloo",
        "rows": rows, "host": platform.node(), "cpus": os.cpu_count(), "load_avg_after": load,
        "command": "python benchmarks/bench_learner.py " + " ".join(sys.argv[1:]),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "bench_learner.json").write_text(json.dumps(report, indent=1) + "\n")
    lines = [
        "# Learner update at the tiny default's shapes (CPU)", "",
        (f"{n_params / 1e6:.1f} M parameters, {args.trajectories} trajectories of ~1.5k tokens per update; "
        f"{report['learner']}. Mean over {args.updates} updates after {args.warmup} warm-up, each configuration in fresh "
        f"processes; {os.cpu_count()} cores shared with other work (load average after: "
        f"{load[0]:.1f}, {load[1]:.1f}, {load[2]:.1f})."), "",
        "| ranks | micro-batch | s / update (mean) | min | max | generated tokens / update | peak RSS rank 0 (MB) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['ranks']} | {r['micro_batch_size']} | {r['seconds_per_update']:.1f} | {r['seconds_min']:.1f} | "
                     f"{r['seconds_max']:.1f} | {r['tokens_per_update']:.0f} | {r['peak_memory_mb_rank0']:.0f} |")
    if load[0] > (os.cpu_count() or 1):
        lines += ["", ("The machine was oversubscribed (load average above the core count): 2 ranks are 2 runnable "
                  "processes and get a larger share of the contended cores than 1, so a 2-rank speed-up here is a "
                  "scheduling effect, not a property of the learner. Re-run on a quiet machine for the "
                  "data-parallel overhead.")]
    lines += ["", f"Command: `{report['command']}`", ""]
    (RESULTS / "bench_learner.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
