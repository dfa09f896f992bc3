"""The single-GPU check (issue 34, item 8): the learner at the shipped width on ONE GPU, against `wmrl plan`.

Run by ``scripts/gpu_check.sh`` (which installs the carried wheels first). On one GPU with torch + CUDA,
no vLLM, no network, in a few minutes:

1. **plan first**: the check's layout (1 node, 1 rank, 1 GPU of this device's memory; the config's
   learner keys: ZeRO-3, bf16, checkpointing, the chunked head, the KL reference) for the config's
   architecture at its real width and vocabulary but ``--layers`` decoder layers (3 linear : 1 full
   attention), and the config's own layout (7 ranks, 32 layers). The check stops (exit 3) if its own
   layout does not fit.
2. **one learner update**: a random-init model of those dimensions (built on the device, saved to a
   temporary directory; nothing downloaded) loaded the learner's way (ZeRO-3 ``zero.Init``, the reference
   as a ZeRO-3 inference engine), one trajectory of ``--tokens`` tokens through the chunked loss head at
   the real vocabulary, one optimizer step. Measured: ``torch.cuda.max_memory_allocated`` over build +
   step, against the check plan's allocated figure (the plan less what torch does not allocate: the
   CUDA context, a sleeping generator).
3. **the 7-rank projection**: the config's own plan (allocated part) times measured / planned of the
   check: printed beside `wmrl plan`'s figure.
4. **the loss head alone** (scripts/measure_loss_head.py) at the real vocabulary, the config's chunk and
   the step's generated positions: measured against ``loss_head_bytes``.
5. **the probes** other items wrote for a GPU, when they exist: ``scripts/gpu_probe_offload.py`` (the
   colocated offload under ZeRO-3) and ``scripts/gpu_probe_vl.py`` (a vision-language checkpoint under
   ZeRO-3), each in its own process; their JSON is kept.

Writes ``result.json`` and ``result.md`` to ``--out`` (default: ``$OUT`` when set, else results/gpu_check).
``--cpu-dry-run`` runs the same code path on the CPU with a tiny model (fp32, a few tokens, the probes
with ``--device auto``, which skip without CUDA): what tests/test_gpu_check.py runs.

    python scripts/gpu_check.py [--config configs/qwen3.5-4b.yaml] [--layers 4] [--tokens 24576]
        [--dims KEY=VALUE,...] [--out DIR] [--cpu-dry-run] [--no-probes] [key=value ...]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from measure_loss_head import measure, status_kb  # found through the sys.path entry above

# What the plan counts on a GPU but torch's allocator does not see.
NOT_ALLOCATED = ("runtime", "generator_asleep")
PROBES = ("gpu_probe_offload.py", "gpu_probe_vl.py")
# The check's layout: one rank on one GPU, the transformers backend (no vLLM), one trajectory per update.
CHECK_LAYOUT = ["launch.coordinator_nodes=1", "launch.coordinator_tasks_per_node=1", "generation.backend=transformers",
                "algorithm.groups_per_step=1", "algorithm.group_size=2", "learner.micro_batch_size=1"]
# --cpu-dry-run: a tiny Qwen3.5 (hybrid layers) and a few tokens, fp32 (bf16 matmuls are slow on a CPU).
TINY_DIMS = {"hidden_size": 64, "intermediate_size": 128, "vocab_size": 512, "linear_num_key_heads": 2,
             "linear_num_value_heads": 4, "num_attention_heads": 2, "num_key_value_heads": 1}
TINY_TOKENS = 64
GIB = 2**30


def text_config(architecture: str, layers: int, dims: dict[str, Any]) -> Any:
    """The architecture's text config with ``layers`` decoder layers (a hybrid one: 3 linear : 1 full
    attention, the shipped order) and ``dims`` replaced."""
    from wmrl.models.architecture import architecture_path, load_text_config

    config = load_text_config(architecture_path(architecture))
    for key, value in {**dims, "num_hidden_layers": layers}.items():
        if not hasattr(config, key):
            raise SystemExit(f"gpu_check: {type(config).__name__} has no field {key}")
        setattr(config, key, value)
    if "linear_attention" in (getattr(config, "layer_types", None) or []):  # Qwen3.5's hybrid, not Qwen3's
        config.layer_types = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)]
    return config


def trajectory(tokens: int, generated: int, turns: int, observation: int, vocab: int, seed: int = 0) -> Any:
    """One multi-turn trajectory of ``tokens`` tokens, ``generated`` of them generated, random ids."""
    import numpy as np

    from wmrl.rollout import EXECUTED, Trajectory, Turn

    rng = np.random.default_rng(seed)
    per_turn = max(generated // turns, 1)
    observation = min(observation, max((tokens - per_turn * turns) // turns, 1))
    first = max(tokens - per_turn * turns - observation * (turns - 1), 1)
    traj = Trajectory(task_id="gpu-check", group=0, index=0, role=EXECUTED)
    for t in range(turns):
        prompt = first if t == 0 else observation
        traj.turns.append(Turn(
            prompt_ids=rng.integers(3, vocab, prompt).tolist(),
            generated_ids=rng.integers(3, vocab, per_turn).tolist(),
            logprobs=(-rng.uniform(1.0, 8.0, per_turn)).tolist(), text="", code=None, parse_error=None,
        ))
    return traj


def allocated(components: dict[str, int]) -> int:
    """The part of a learner phase torch's allocator holds (the plan less the CUDA context etc.)."""
    return sum(v for k, v in components.items() if k not in NOT_ALLOCATED)


def parse_dims(text: str) -> dict[str, Any]:
    """``key=value,...`` (values JSON) for --dims."""
    dims: dict[str, Any] = {}
    for item in filter(None, text.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"gpu_check: --dims takes key=value,..., got {item!r}")
        dims[key] = json.loads(value)
    return dims


def plans(args: argparse.Namespace, gpu_gb: float) -> tuple[Any, Any, Any, Any]:
    """(check config, its text config, the check's plan, the config's own plan)."""
    from wmrl.config import load_config
    from wmrl.models.architecture import parameter_counts
    from wmrl.planning.memory import model_counts, plan

    extra = ["learner.precision=fp32"] if args.cpu_dry_run else []  # before the user's overrides
    own = load_config(args.config, [*extra, *args.overrides])
    layout = [*CHECK_LAYOUT, f"launch.coordinator_gpus={0 if args.cpu_dry_run else 1}",
              f"launch.coordinator_gpu_memory_gb={gpu_gb}", f"agent.max_context_tokens={args.tokens}"]
    cfg = load_config(args.config, [*extra, *args.overrides, *layout])
    architecture = cfg.model.architecture or "qwen3.5-4b"
    config = text_config(architecture, args.layers, args.dims)
    check = plan(cfg, parameter_counts(config), model=f"{architecture}, {args.layers} layers")
    model, counts = model_counts(own)
    if args.dims:  # the same dimensions at the config's own layer count
        counts = parameter_counts(text_config(architecture, own_layers(architecture), args.dims))
    return cfg, config, check, plan(own, counts, model)


def own_layers(architecture: str) -> int:
    from wmrl.models.architecture import architecture_path, load_text_config

    return load_text_config(architecture_path(architecture)).num_hidden_layers


def learner_step(cfg: Any, config: Any, planned: Any, cuda: bool) -> dict[str, Any]:
    """One learner update of a random-init model of ``config``; its measured peak and seconds."""
    import deepspeed.runtime.engine
    import deepspeed.runtime.zero.stage3  # noqa: F401 - imported before the baseline (not the learner's memory)
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM

    from wmrl.learner.distributed import init_distributed
    from wmrl.learner.grpo import GRPOLearner
    from wmrl.models.kernels import kernel_report

    with tempfile.TemporaryDirectory(prefix="wmrl-gpu-check-") as tmp:
        torch.manual_seed(0)
        started = time.perf_counter()
        with torch.device("cuda" if cuda else "cpu"):  # random init on the GPU: seconds, not minutes
            model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16 if cuda else torch.float32)
        model.save_pretrained(tmp)
        del model
        saved = time.perf_counter()
        traj = trajectory(planned.tokens, planned.generated, cfg.agent.max_turns, cfg.agent.observation_tokens,
                          config.vocab_size)
        init_distributed()
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        before_kb = status_kb("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS (the CPU's peak)
        learner = GRPOLearner(cfg.learner, tmp)
        built = time.perf_counter()
        kernels = kernel_report(learner.engine.module).summary()  # the linear-attention kernels it runs
        metrics = learner.update([[traj]], np.zeros((1, 1)), np.ones(1))
        if cuda:
            torch.cuda.synchronize()
        stepped = time.perf_counter()
        peak = torch.cuda.max_memory_allocated() if cuda else (status_kb("VmHWM") - before_kb) * 1024
    return {"measured_peak_bytes": peak, "loss": metrics.get("learner/loss"),
            "kernels": kernels,
            "model_seconds": round(saved - started, 1), "build_seconds": round(built - saved, 1),
            "step_seconds": round(stepped - built, 1)}


def head_check(cfg: Any, config: Any, planned: Any, cuda: bool) -> dict[str, Any]:
    """The chunked loss head alone at the check's vocabulary, chunk and generated positions."""
    chunk = min(cfg.learner.loss_chunk_tokens, planned.generated)
    if not cuda:  # a separate process: the CPU measurement needs its own malloc settings
        case = f"{cfg.learner.precision}:{config.vocab_size}:{chunk}:{config.hidden_size}:{planned.generated}"
        done = subprocess.run([sys.executable, str(ROOT / "scripts" / "measure_loss_head.py"), "--case", case],
                              capture_output=True, text=True, timeout=600, check=True)
        return json.loads(done.stdout.splitlines()[-1])
    return measure("cuda", cfg.learner.precision, config.vocab_size, chunk, config.hidden_size, planned.generated)


def _last_json(text: str) -> dict[str, Any] | None:
    """The last JSON object a probe printed (one line, or indented over several)."""
    starts = [i for i, ch in enumerate(text) if ch == "{" and (i == 0 or text[i - 1] == "\n")]
    for start in reversed(starts):
        try:
            return json.loads(text[start:])
        except json.JSONDecodeError:
            continue
    return None


def run_probes(cuda: bool, timeout_s: int, scripts: Path = ROOT / "scripts") -> dict[str, Any]:
    """Each probe of ``scripts`` that exists, in its own process (``--device cuda``, or ``auto`` without
    CUDA): its exit code, seconds and the JSON it printed."""
    results: dict[str, Any] = {}
    for name in PROBES:
        path = scripts / name
        if not path.is_file():
            results[name] = {"ran": False, "why": "not in this checkout"}
            continue
        started = time.perf_counter()
        try:
            done = subprocess.run([sys.executable, str(path), "--device", "cuda" if cuda else "auto"],
                                  capture_output=True, text=True, timeout=timeout_s, check=False, cwd=ROOT)
        except subprocess.TimeoutExpired:
            results[name] = {"ran": True, "rc": None, "why": f"timed out after {timeout_s} s"}
            continue
        results[name] = {"ran": True, "rc": done.returncode, "seconds": round(time.perf_counter() - started, 1),
                         "result": _last_json(done.stdout), "stderr_tail": done.stderr[-1500:]}
    return results


def markdown(r: dict[str, Any]) -> str:
    rows = "\n".join(f"| {k} | {r['check_plan_components_gb'].get(k, '')} | {v} |"
                     for k, v in r["own_plan_components_gb"].items())
    head = r["loss_head"]
    probes = "\n".join(f"| {name} | {p.get('rc', '-') if p['ran'] else 'not run: ' + p['why']} | "
                       f"{(p.get('result') or {}).get('ok', (p.get('result') or {}).get('skipped', ''))} |"
                       for name, p in r["probes"].items())
    return (f"# GPU check: {r['model']} on {r['device']}\n\n"
            f"One learner update on one rank: {r['layers']} layers at the real width, vocabulary "
            f"{r['vocab_size']:,}, {r['tokens']:,} tokens ({r['generated']:,} generated), ZeRO-{r['zero_stage']}, "
            f"{r['precision']}, loss chunk {r['loss_chunk_tokens']}, {r['parameters'] / 1e9:.3f} B parameters.\n\n"
            f"| | GB |\n|---|---|\n"
            f"| planned, this check (learner phase, allocated) | {r['check_planned_gb']} |\n"
            f"| measured peak ({r['measurement']}) | {r['measured_peak_gb']} |\n"
            f"| `wmrl plan` {r['config']}: {r['own_ranks']} ranks, allocated | {r['own_planned_gb']} |\n"
            f"| projected {r['own_ranks']}-rank peak (that x measured / planned) | {r['projected_own_peak_gb']} |\n"
            f"| `wmrl plan` {r['config']}: learner phase per GPU, total | {r['own_plan_total_gb']} |\n\n"
            f"measured / planned = {r['measured_over_planned']}; model {r['model_seconds']} s, build "
            f"{r['build_seconds']} s, step {r['step_seconds']} s.\n\n"
            f"Loss head alone ({head['chunk']} x {head['vocab']:,} per chunk, {head['positions']:,} positions): "
            f"measured {round(head['measured_bytes'] / GIB, 3)} GB, planned {round(head['planned_bytes'] / GIB, 3)} GB "
            f"(planned / measured {head['planned_over_measured']}).\n\n"
            f"| component | this check, GB | {r['own_ranks']} ranks, GB |\n|---|---|---|\n{rows}\n\n"
            f"| probe | rc | ok |\n|---|---|---|\n{probes}\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    parser.add_argument("--config", default=str(ROOT / "configs" / "qwen3.5-4b.yaml"))
    parser.add_argument("--layers", type=int, default=4, help="decoder layers (3 linear : 1 full attention)")
    parser.add_argument("--tokens", type=int, default=None, help=f"default 24576 ({TINY_TOKENS} with --cpu-dry-run)")
    parser.add_argument("--dims", type=parse_dims, default=None, metavar="KEY=VALUE,...",
                        help="dimensions of the architecture to replace (default: none; a tiny model with "
                             "--cpu-dry-run; '' for none there too)")
    parser.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "results" / "gpu_check"))
    parser.add_argument("--cpu-dry-run", action="store_true", help="the same path on the CPU, a tiny model")
    parser.add_argument("--no-probes", action="store_true")
    parser.add_argument("--probe-timeout-s", type=int, default=150,
                        help="each probe's limit: the check stays within 8 minutes")
    args = parser.parse_args(argv)
    if args.tokens is None:
        args.tokens = TINY_TOKENS if args.cpu_dry_run else 24576
    if args.dims is None:
        args.dims = dict(TINY_DIMS) if args.cpu_dry_run else {}
    import torch

    cuda = not args.cpu_dry_run
    if cuda and not torch.cuda.is_available():
        print("gpu_check: no CUDA device here (torch.cuda.is_available() is False); --cpu-dry-run runs the same "
              "code path on the CPU with a tiny model", file=sys.stderr)
        return 2
    gpu_gb = round(torch.cuda.get_device_properties(0).total_memory / GIB, 1) if cuda else 80.0
    cfg, config, check, own = plans(args, gpu_gb)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not check.fits:
        (out / "result.json").write_text(json.dumps({"fits": False, "problems": check.problems}, indent=2) + "\n")
        print("gpu_check: the check's own layout does not fit this GPU (`wmrl plan`): " + "; ".join(check.problems),
              file=sys.stderr)
        return 3
    print(f"gpu_check: planned {round(allocated(check.learner.gpu) / GIB, 2)} GB allocated on one rank; "
          f"`wmrl plan` {Path(args.config).name}: {round(check.learner.gpu_total / GIB, 2)} GB here, "
          f"{round(own.learner.gpu_total / GIB, 2)} GB per GPU at {own.learner_ranks} ranks", flush=True)
    step = learner_step(cfg, config, check, cuda)
    gc.collect()  # the learner's GPU memory back before the head's measurement and the probes' processes
    if cuda:
        torch.cuda.empty_cache()
    head = head_check(cfg, config, check, cuda)
    planned_check, planned_own = allocated(check.learner.gpu), allocated(own.learner.gpu)
    ratio = step["measured_peak_bytes"] / planned_check
    result = {
        "device": torch.cuda.get_device_name(0) if cuda else "cpu (--cpu-dry-run)",
        "measurement": "torch.cuda.max_memory_allocated (build + step)" if cuda
        else "VmHWM - VmRSS before the learner is built",
        "versions": {"torch": torch.__version__, "cuda": torch.version.cuda},
        "config": Path(args.config).name, "model": check.model, "layers": args.layers,
        "parameters": check.counts.total, "vocab_size": config.vocab_size, "hidden_size": config.hidden_size,
        "tokens": check.tokens, "generated": check.generated, "zero_stage": cfg.learner.zero_stage,
        "precision": cfg.learner.precision, "loss_chunk_tokens": cfg.learner.loss_chunk_tokens,
        "check_planned_gb": round(planned_check / GIB, 3),
        "check_plan_components_gb": {k: round(v / GIB, 3) for k, v in check.learner.gpu.items()},
        "measured_peak_gb": round(step["measured_peak_bytes"] / GIB, 3),
        "measured_over_planned": round(ratio, 3),
        "own_ranks": own.learner_ranks, "own_planned_gb": round(planned_own / GIB, 3),
        "own_plan_total_gb": round(own.learner.gpu_total / GIB, 3),
        "own_plan_components_gb": {k: round(v / GIB, 3) for k, v in own.learner.gpu.items()},
        "projected_own_peak_gb": round(planned_own * ratio / GIB, 3),
        **{k: v for k, v in step.items() if k != "measured_peak_bytes"},
        "loss_head": head,
        "probes": {} if args.no_probes else run_probes(cuda, args.probe_timeout_s),
    }
    text = markdown(result)
    print(text, flush=True)
    (out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "result.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
