"""One full WMRL step of the LLM trainer on a GPU machine, with vLLM generation and the DeepSpeed
learner, on a random-init model of the Qwen3.5 architecture (>= 0.5B parameters, built here: nothing
is downloaded). Prints the step-time breakdown as JSON and writes it to ``OUT/breakdown.json``.

    bash scripts/gpu_smoke_step.sh        # scripts/gpu_smoke.sh (colocated placement), then this
    python scripts/gpu_smoke_step.py --out results/gpu_smoke_step
    python scripts/gpu_smoke_step.py --dry-run --out /tmp/smoke   # CPU: config + a tiny model, no step

The step is the real thing end to end: ``wmrl launch`` of a config with ``trainer: llm`` and the local
executor (coordinator in this process, anchor workers as local processes running the ``subprocess``
sandbox, since a bare GPU box may lack bubblewrap), the vLLM generator with CUDA-IPC weight transfer,
the world model as a second, frozen vLLM engine in the same process, and the DeepSpeed learner
(bf16, ZeRO-2). The breakdown comes from the run's ``metrics.jsonl``: the step's measured seconds per
phase (generation, world model, execution, learner update), weight sync and rollout I/O.

``--dry-run`` builds the same config (generation.backend=transformers on CPU) and a tiny model of the
same architecture, checks that both load, and runs one forward pass; it needs no GPU and is tested.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# A step of the paper's shape, shrunk to fit one GPU and a few minutes: 4 groups of 4, 2 turns.
SMOKE_CONFIG: dict[str, Any] = {
    "run_name": "gpu-smoke-step",
    "trainer": "llm",
    "algorithm": {"variant": "wmrl", "groups_per_step": 4, "group_size": 4, "anchor_frac": 0.25,
                  "min_anchor_groups": 1, "seed": 0},
    "agent": {"prompt_style": "full", "max_turns": 2, "observation_tokens": 1024, "max_context_tokens": 8192},
    "sampling": {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 512},
    "world_model": {"backend": "in_process", "max_new_tokens": 256, "precheck": True},
    "generation": {"backend": "vllm",
                   "vllm": {"weight_transfer": "ipc", "gpu_memory_utilization": 0.25, "max_model_len": 8192,
                            "dtype": "bfloat16"}},
    "model": {"dtype": "bfloat16"},
    "learner": {"lr": 1.0e-6, "kl_coef": 0.04, "entropy_coef": 0.002, "micro_batch_size": 1, "zero_stage": 2,
                "precision": "bf16", "gradient_checkpointing": True},
    "train": {"steps": 1, "eval_split": "none", "save_every": 1},
    "sandbox": {"backend": "subprocess", "timeout_s": 300},
    "launch": {"executor": "local", "workers": 4},
    "tracking": {"enabled": False},
}

# Qwen3.5's text architecture (3 Gated-DeltaNet layers : 1 full-attention layer) at ~0.6B parameters
# with a 32k-token vocabulary; the dry run keeps the architecture and shrinks every size.
GPU_SIZES: dict[str, int] = {"vocab_size": 32768, "hidden_size": 1280, "num_hidden_layers": 24,
                             "intermediate_size": 4608, "num_attention_heads": 10, "num_key_value_heads": 2,
                             "head_dim": 128, "linear_num_key_heads": 8, "linear_num_value_heads": 16,
                             "linear_key_head_dim": 64, "linear_value_head_dim": 64}
DRY_SIZES: dict[str, int] = {"vocab_size": 1024, "hidden_size": 64, "num_hidden_layers": 4,
                             "intermediate_size": 128, "num_attention_heads": 2, "num_key_value_heads": 1,
                             "head_dim": 32, "linear_num_key_heads": 2, "linear_num_value_heads": 2,
                             "linear_key_head_dim": 16, "linear_value_head_dim": 16}
MIN_GPU_PARAMS = 500_000_000


def qwen35_config(sizes: dict[str, int], tokenizer: Any, max_positions: int = 32768) -> Any:
    from transformers import Qwen3_5TextConfig

    layers = sizes["num_hidden_layers"]
    return Qwen3_5TextConfig(
        **sizes,
        layer_types=["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)],
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def count_parameters(config: Any) -> int:
    """Parameters of ``Qwen3_5ForCausalLM(config)`` without allocating them (meta device)."""
    import torch
    from transformers import Qwen3_5ForCausalLM

    with torch.device("meta"):
        model = Qwen3_5ForCausalLM(config)
    return sum(p.numel() for p in model.parameters())


def build_model(out: Path, sizes: dict[str, int], corpus: list[str], dtype: str, seed: int = 0) -> dict[str, Any]:
    """Tokenizer trained on ``corpus`` + random-init Qwen3.5 model, saved as a plain HF directory."""
    import torch
    from transformers import GenerationConfig, Qwen3_5ForCausalLM

    from wmrl.models.tokenizer import ENDOFTEXT, save_tokenizer, train_bpe, wrap_hf

    tokenizer = wrap_hf(train_bpe(corpus, sizes["vocab_size"]), 32768)
    config = qwen35_config(sizes, tokenizer)
    torch.manual_seed(seed)
    model = Qwen3_5ForCausalLM(config).to(getattr(torch, dtype))
    model.generation_config = GenerationConfig(
        do_sample=True, temperature=1.0, top_p=1.0, pad_token_id=tokenizer.pad_token_id,
        eos_token_id=[tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids(ENDOFTEXT)])
    model.save_pretrained(str(out))
    save_tokenizer(tokenizer, out)
    return {"parameters": sum(p.numel() for p in model.parameters()), "architecture": type(model).__name__,
            "layer_types": sorted(set(config.layer_types)), "vocab": len(tokenizer)}


def run_config(model_dir: Path, runs_root: Path, dry_run: bool) -> dict[str, Any]:
    cfg = json.loads(json.dumps(SMOKE_CONFIG))
    cfg["model"]["path"] = str(model_dir)
    cfg["runs_root"] = str(runs_root)
    if dry_run:  # the same run on CPU: transformers generation, fp32 learner
        cfg["generation"]["backend"] = "transformers"
        cfg["model"]["dtype"] = "float32"
        cfg["learner"]["precision"] = "fp32"
    return cfg


def breakdown(run_dir: Path) -> dict[str, Any]:
    """The step-time breakdown of the run's first step, from ``metrics.jsonl``."""
    from wmrl.storage.metrics_log import METRICS, read_rows
    from wmrl.trainers.llm.names import STEP_PHASE_KEYS

    rows = read_rows(run_dir / METRICS)
    m = rows[min(rows)]
    phases = {phase: m.get(key) for phase, key in STEP_PHASE_KEYS.items()}
    keep = ("learner/peak_memory_mb", "learner/tokens", "learner/trajectories", "learner/ratio_mean_abs_dev",
            "reply_tokens_mean", "executions", "wm_calls", "rho")
    return {"seconds": phases, **{k: m[k] for k in keep if k in m}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("results/gpu_smoke_step"))
    ap.add_argument("--tasks-root", default="", help="task pool (default: the built-in pool, built on first use)")
    ap.add_argument("--dry-run", action="store_true", help="CPU: build config and a tiny model, no step")
    args = ap.parse_args(argv)
    import yaml

    from wmrl.config import load_config
    from wmrl.models.corpus import prompt_texts, tokenizer_corpus
    from wmrl.models.init import pool_root_for

    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    model_dir, runs_root = out / "model", out / "runs"
    if args.dry_run:  # the agent's prompts are corpus enough for a tiny tokenizer
        sizes, corpus, dtype = DRY_SIZES, prompt_texts(), "float32"
    else:
        sizes, dtype = GPU_SIZES, "bfloat16"
        corpus = tokenizer_corpus(pool_root_for(args.tasks_root), prompt_texts())
    started = time.perf_counter()
    model = build_model(model_dir, sizes, corpus, dtype)
    model["build_seconds"] = round(time.perf_counter() - started, 2)
    cfg = run_config(model_dir, runs_root, args.dry_run)
    if args.tasks_root:
        cfg["tasks"] = {"root": args.tasks_root}
    config_path = out / "config.yaml"
    config_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    loaded = load_config(config_path)  # validates every key, as `wmrl launch` will
    report: dict[str, Any] = {"model": model, "config": str(config_path)}
    if args.dry_run:
        report["forward_ok"] = _forward(model_dir)
    else:
        if model["parameters"] < MIN_GPU_PARAMS:
            raise SystemExit(f"model has {model['parameters']} parameters, the smoke test wants >= {MIN_GPU_PARAMS}")
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "wmrl.cli.main", "launch", str(config_path)], check=True,
                       env={**os.environ, "PYTHONUNBUFFERED": "1"})
        report["wall_seconds"] = round(time.perf_counter() - started, 1)
        report["step"] = breakdown(loaded.run_dir)
        report["gpu"] = _gpu_name()
    (out / "breakdown.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    return 0


def _forward(model_dir: Path) -> bool:
    """One forward pass of the saved model through wmrl's loader (the PyTorch fallback on CPU)."""
    import torch

    from wmrl.models.loading import load_causal_lm

    model = load_causal_lm(model_dir)
    with torch.no_grad():
        logits = model(torch.tensor([[1, 2, 3, 4]])).logits
    return bool(torch.isfinite(logits).all())


def _gpu_name() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"


if __name__ == "__main__":
    sys.exit(main())
