"""vLLM generation, sleep/wake and an in-place weight update, for one placement, on a random-init
Qwen3.5-architecture model (GPU only; ``scripts/gpu_smoke.sh`` runs both placements).

Builds a ~0.5B-parameter ``Qwen3_5ForCausalLM`` (hybrid Gated-DeltaNet / full-attention layers, as the
paper's 4B/9B) with a locally trained tokenizer and serves it with :class:`VLLMGenerator`:

- ``--placement colocated`` (one GPU): the engine with sleep mode; measures generation tokens/s, then
  ``sleep(level)`` while the "learner" (the same model, perturbed, on the GPU) trains, ``wake_up(["weights"])``,
  the CUDA-IPC weight update, ``wake_up(["kv_cache"])``, and checks that the outputs changed;
- ``--placement dedicated`` (two GPUs or more): the engine on the last GPU, the learner on the first,
  the weight update over NCCL to this node's address in the allocation.

Writes a JSON record (``--out``) and prints it.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch


def build_model(out: Path) -> int:
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    from wmrl.models.corpus import GENERIC_TEXT
    from wmrl.models.tokenizer import save_tokenizer, train_bpe, wrap_hf

    tok = wrap_hf(train_bpe([GENERIC_TEXT] * 4, 4096), 8192)
    config = Qwen3_5TextConfig(
        vocab_size=151936, hidden_size=1024, intermediate_size=3584, num_hidden_layers=24,
        num_attention_heads=8, num_key_value_heads=2, head_dim=256, max_position_embeddings=8192,
        tie_word_embeddings=True, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(0)
    model = Qwen3_5ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(str(out))
    save_tokenizer(tok, out)
    return sum(p.numel() for p in model.parameters())


def timed(fn, *args) -> float:
    torch.cuda.synchronize()
    started = time.perf_counter()
    fn(*args)
    torch.cuda.synchronize()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--placement", choices=("colocated", "dedicated"), default="colocated")
    parser.add_argument("--sleep-level", type=int, choices=(1, 2), default=1)
    parser.add_argument("--batch", type=int, default=64, help="prompts per generate call (m * n = 64 in the paper)")
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--out", default=None, help="default: results/gpu_smoke_<placement>.json")
    args = parser.parse_args()

    from wmrl.generation.base import SamplingParams
    from wmrl.generation.config import VLLMConfig
    from wmrl.generation.vllm_engine import VLLMGenerator
    from wmrl.models.loading import load_causal_lm

    colocated = args.placement == "colocated"
    if not colocated and torch.cuda.device_count() < 2:
        raise SystemExit("--placement dedicated needs 2 GPUs (the learner's and vLLM's); use colocated on one GPU")
    record: dict = {"placement": args.placement, "transfer": "ipc" if colocated else "nccl",
                    "sleep_level": args.sleep_level if colocated else None, "batch": args.batch,
                    "new_tokens": args.new_tokens, "gpu": torch.cuda.get_device_name(0),
                    "gpus": torch.cuda.device_count()}
    with tempfile.TemporaryDirectory(prefix="wmrl-gpu-smoke-") as tmp:
        path = Path(tmp) / "qwen3_5-random"
        record["parameters"] = build_model(path)
        started = time.perf_counter()
        cfg = VLLMConfig(placement=args.placement, inference_gpus=0 if colocated else 1, sleep_level=args.sleep_level,
                         gpu_memory_utilization=0.5, max_model_len=4096, dtype="bfloat16")
        gen = VLLMGenerator(str(path), cfg)
        record["engine_start_s"] = time.perf_counter() - started
        prompt = gen.tokenizer.apply_chat_template([{"role": "user", "content": "Write a solution."}],
                                                   add_generation_prompt=True, tokenize=False)
        ids = gen.tokenizer.encode(prompt, add_special_tokens=False)
        # No stop: random weights rarely emit <|im_end|>, and a fixed length makes tokens/s comparable.
        params = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=args.new_tokens, seed=0)
        gen.stop_ids = []
        gen.generate([ids] * 4, params)  # warm-up (CUDA graphs, caches)
        started = time.perf_counter()
        before = gen.generate([ids] * args.batch, params)
        seconds = time.perf_counter() - started
        tokens = sum(len(g.token_ids) for g in before)
        record.update(generate_s=seconds, generated_tokens=tokens, tokens_per_s=tokens / seconds)

        if colocated:  # the learner's turn: vLLM sleeps
            record["sleep_s"] = timed(gen.sleep)
        learner = load_causal_lm(path, dtype="bfloat16", device="cuda:0")  # the learner's GPU in both placements
        with torch.no_grad():
            for p in learner.parameters():
                p.add_(torch.randn_like(p) * 0.02)
        if colocated:
            record["wake_weights_s"] = timed(gen.wake_up, ["weights"])
        record["weight_update_s"] = timed(gen.update_weights, learner.named_parameters())
        if colocated:
            del learner  # the learner's states leave the GPU before vLLM's KV cache comes back
            torch.cuda.empty_cache()
            record["wake_kv_cache_s"] = timed(gen.wake_up, ["kv_cache"])
        after = gen.generate([ids] * 4, params)
        record["outputs_changed"] = [g.token_ids for g in after] != [g.token_ids for g in before[:4]]
    out = Path(args.out or f"results/gpu_smoke_{args.placement}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record, indent=1))
    if not record["outputs_changed"]:
        raise SystemExit("weight update did not change the outputs")


if __name__ == "__main__":
    main()
