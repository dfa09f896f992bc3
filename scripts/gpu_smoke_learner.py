"""One learner step of a random-init Qwen3.5-architecture model, measured against `wmrl plan`.

The model is ``model.architecture`` of CONFIG (default: the 4B config's) with the real 248k-token
vocabulary, built with random weights (nothing downloaded) and saved to a temporary directory; the
learner (CONFIG's learner keys: ZeRO stage, precision, chunked head, checkpointing) takes one update on
one trajectory of --tokens tokens on one device. Printed and written to OUT (json + md): the measured
peak beside the plan's learner-phase figure for the same layout, and the step's seconds.

- cuda: peak = ``torch.cuda.max_memory_allocated`` over building the learner and the step; the plan's
  figure without its non-tensor parts (CUDA context, the sleeping generator) is what it is compared to.
- cpu (``--device cpu``, the CPU-equivalent path, usually with ``--dims`` shrinking the model): peak =
  the process's resident high-water mark (``VmHWM``) less its resident set just before the learner is
  built (after the imports and the model's files are written), against the plan with
  ``launch.coordinator_gpus=0``.

  python scripts/gpu_smoke_learner.py [--config CONFIG] [--tokens 24576] [--device cuda|cpu]
      [--dims hidden_size=256,num_hidden_layers=4] [--out results/gpu_smoke_learner] [key=value ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# What the plan counts on a GPU but torch's allocator does not see.
NOT_ALLOCATED = ("runtime", "generator_asleep")


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def _parse_dims(text: str) -> dict[str, Any]:
    dims: dict[str, Any] = {}
    for item in filter(None, text.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--dims takes key=value, got {item!r}")
        dims[key] = json.loads(value)
    return dims


def text_config(architecture: str, dims: dict[str, Any]) -> Any:
    """The architecture's text config with ``dims`` replaced (layer types re-derived, 3 linear : 1 full)."""
    from wmrl.models.architecture import architecture_path, load_text_config

    config = load_text_config(architecture_path(architecture))
    for key, value in dims.items():
        if not hasattr(config, key):
            raise SystemExit(f"--dims {key}: {type(config).__name__} has no such field")
        setattr(config, key, value)
    if "num_hidden_layers" in dims and hasattr(config, "layer_types"):
        config.layer_types = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention"
                              for i in range(config.num_hidden_layers)]
    return config


def trajectory(tokens: int, generated: int, turns: int, observation: int, vocab: int, seed: int = 0) -> Any:
    """One multi-turn trajectory of ``tokens`` tokens, ``generated`` of them generated, random ids."""
    import numpy as np

    from wmrl.rollout import EXECUTED, Trajectory, Turn

    rng = np.random.default_rng(seed)
    per_turn = max(generated // turns, 1)
    observation = min(observation, max((tokens - per_turn * turns) // turns, 1))
    first = max(tokens - per_turn * turns - observation * (turns - 1), 1)
    traj = Trajectory(task_id="smoke", group=0, index=0, role=EXECUTED)
    for t in range(turns):
        prompt = first if t == 0 else observation
        traj.turns.append(Turn(
            prompt_ids=rng.integers(3, vocab, prompt).tolist(),
            generated_ids=rng.integers(3, vocab, per_turn).tolist(),
            logprobs=(-rng.uniform(1.0, 8.0, per_turn)).tolist(), text="", code=None, parse_error=None,
        ))
    return traj


def run(args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np
    import torch

    from wmrl.config import load_config
    from wmrl.models.architecture import parameter_counts
    from wmrl.orchestration.memory_plan import plan

    cuda = args.device == "cuda"
    layout = [
        "launch.coordinator_nodes=1", "launch.coordinator_tasks_per_node=1",
        f"launch.coordinator_gpus={1 if cuda else 0}", "generation.backend=transformers",
        "algorithm.groups_per_step=1", "algorithm.group_size=2", "learner.micro_batch_size=1",
        f"agent.max_context_tokens={args.tokens}",
    ]
    cfg = load_config(args.config, [*args.overrides, *layout])
    if cuda:
        cfg.launch.coordinator_gpu_memory_gb = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
    architecture = cfg.model.architecture or "qwen3.5-4b"
    config = text_config(architecture, _parse_dims(args.dims))
    counts = parameter_counts(config)
    planned = plan(cfg, counts, model=architecture)
    tokens, generated = planned.tokens, planned.generated

    from transformers import AutoModelForCausalLM

    from wmrl.learner.grpo import GRPOLearner

    with tempfile.TemporaryDirectory(prefix="wmrl-smoke-") as tmp:
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
        model.save_pretrained(tmp)
        del model
        traj = trajectory(tokens, generated, cfg.agent.max_turns, cfg.agent.observation_tokens, counts.vocab_size)
        # What every learner process pays before its first tensor (DeepSpeed's modules, the process
        # group) is not the learner's memory: started before the baseline.
        import deepspeed.runtime.engine
        import deepspeed.runtime.zero.stage3
        import deepspeed.runtime.zero.stage_1_and_2  # noqa: F401

        from wmrl.learner.distributed import init_distributed

        init_distributed()
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        before_kb = _status_kb("VmRSS")
        started = time.perf_counter()
        learner = GRPOLearner(cfg.learner, tmp)
        built = time.perf_counter()
        metrics = learner.update([[traj]], np.zeros((1, 1)), np.ones(1))
        if cuda:
            torch.cuda.synchronize()
        stepped = time.perf_counter()
        measured = torch.cuda.max_memory_allocated() if cuda else (_status_kb("VmHWM") - before_kb) * 1024
    components = planned.learner.gpu
    predicted = sum(v for k, v in components.items() if k not in NOT_ALLOCATED)
    return {
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "measurement": "torch.cuda.max_memory_allocated (build + step)" if cuda
        else "VmHWM - VmRSS before the learner is built",
        "architecture": architecture, "dims": _parse_dims(args.dims), "parameters": counts.total,
        "vocab_size": counts.vocab_size, "tokens": tokens, "generated": generated,
        "zero_stage": cfg.learner.zero_stage, "precision": cfg.learner.precision,
        "offload_optimizer": cfg.learner.offload_optimizer,
        "gradient_checkpointing": cfg.learner.gradient_checkpointing,
        "loss_chunk_tokens": cfg.learner.loss_chunk_tokens,
        "planned_gb": round(predicted / 2**30, 3),
        "planned_components_gb": {k: round(v / 2**30, 3) for k, v in components.items()},
        "measured_peak_gb": round(measured / 2**30, 3),
        "measured_over_planned": round(measured / predicted, 3),
        "learner_peak_memory_mb": metrics.get("learner/peak_memory_mb"),
        "build_seconds": round(built - started, 2),
        "step_seconds": round(stepped - built, 2),
    }


def markdown(result: dict[str, Any]) -> str:
    rows = "\n".join(f"| {k} | {v} |" for k, v in result["planned_components_gb"].items())
    return (f"# Learner GPU smoke: {result['architecture']} on {result['device']}\n\n"
            f"One update, {result['tokens']:,} tokens ({result['generated']:,} generated), ZeRO-{result['zero_stage']}, "
            f"{result['precision']}, loss chunk {result['loss_chunk_tokens']}, {result['parameters'] / 1e9:.3f} B "
            f"parameters, vocabulary {result['vocab_size']:,}.\n\n"
            f"| | GB |\n|---|---|\n| planned (learner phase, allocated) | {result['planned_gb']} |\n"
            f"| measured peak ({result['measurement']}) | {result['measured_peak_gb']} |\n\n"
            f"measured / planned = {result['measured_over_planned']}; build {result['build_seconds']} s, "
            f"step {result['step_seconds']} s.\n\n| planned component | GB |\n|---|---|\n{rows}\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    parser.add_argument("--config", default=str(ROOT / "configs" / "qwen3.5-4b.yaml"))
    parser.add_argument("--tokens", type=int, default=24576)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--dims", default="", metavar="KEY=VALUE,...",
                        help="replace dimensions of the architecture (the CPU path: a small model)")
    parser.add_argument("--out", default="", help="directory for result.json and result.md")
    args = parser.parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_smoke_learner: no CUDA device here (torch.cuda.is_available() is False); this smoke measures "
              "a GPU. --device cpu runs its CPU-equivalent path (with --dims for a small model).", file=sys.stderr)
        return 2
    result = run(args)
    text = markdown(result)
    print(text, flush=True)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
        (out / "result.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
