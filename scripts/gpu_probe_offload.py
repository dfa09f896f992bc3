"""Probe (issue 34, item 2): the colocated placement's offload under ZeRO-3 moves the learner's states and
the reference off the GPU and brings them back intact.

One process, one GPU, torch + CUDA + transformers + DeepSpeed, no vLLM, no network; well under two
minutes once DeepSpeed's ``fused_adam`` CUDA op is built (its first JIT build needs nvcc and ninja, about
a minute; ``TORCH_EXTENSIONS_DIR`` caches it). A random-init ``Qwen3ForCausalLM`` (``--hidden``,
``--layers``, ``--vocab``; the default ~115 M parameters) saved to a temporary directory is built the
learner's way (``GRPOLearner``: ZeRO-3, bf16, the optimizer ``optimizer_kind`` picks, the KL reference
as a ZeRO-3 inference engine), takes one optimizer step (so the Adam moments exist), and then:

- ``offload_states()``: the GPU memory it frees (``torch.cuda.memory_allocated``) against the bytes of
  the states it should move (bf16/fp32 partitions, gradient partitions, Adam moments, the reference's
  partitions), and which of DeepSpeed's states it moved;
- ``reload_states()``: the memory back, the fp32 master weights, Adam moments and the reference's
  partitions bit-identical to before, and one more optimizer step with a finite loss.

  python scripts/gpu_probe_offload.py [--device auto|cuda|cpu]

``auto`` (the default) skips without CUDA: one JSON line with ``"skipped"``, exit 0. ``cpu`` runs the same
round trip on the CPU (gloo; torch's AdamW, so DeepSpeed moves only the partitions it may move and no
memory is freed): the logic, not the bytes. Prints one JSON object; exit 0 when every check holds, else 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MIB = 2**20


def _nbytes(tensors: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _adam_moments(optimizer: Any) -> list[Any]:
    return [v for state in optimizer.state.values() for k, v in state.items() if k in ("exp_avg", "exp_avg_sq")]


def _state_bytes(learner: Any) -> dict[str, int]:
    """The bytes each of DeepSpeed's offloadable states holds on this rank (stage3.py's buffers)."""
    zero = learner.engine.optimizer
    sizes = {"hp_params": _nbytes(zero.fp32_partitioned_groups_flat), "lp_params": _nbytes([zero.lp_param_buffer]),
             "lp_grads": _nbytes([zero.grad_partitions_flat_buffer]),
             "optim_states": _nbytes(_adam_moments(zero.optimizer))}
    if learner.reference_partitions is not None:
        sizes["reference"] = learner.reference_partitions.nbytes
    return sizes


def _checksums(learner: Any) -> dict[str, float]:
    """float64 sums of what must survive the round trip unchanged."""
    zero = learner.engine.optimizer
    sums = {"hp_params": sum(float(t.double().sum()) for t in zero.fp32_partitioned_groups_flat),
            "optim_states": sum(float(t.double().sum()) for t in _adam_moments(zero.optimizer))}
    if learner.reference_partitions is not None:
        sums["reference"] = sum(float(t.double().sum()) for t in learner.reference_partitions.partitions)
    return sums


def _step(learner: Any, vocab: int, seed: int) -> float:
    import torch

    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab, (2, 64), generator=gen).to(learner.device)
    with torch.no_grad():
        learner.reference(input_ids=ids)  # the reference's gathers, as the KL term runs them
    loss = learner.engine(input_ids=ids).logits.float().logsumexp(-1).mean()
    learner.engine.backward(loss)
    learner.engine.step()
    return float(loss)


def _allocated(cuda: bool) -> int | None:
    import torch

    if not cuda:
        return None
    torch.cuda.synchronize()
    return int(torch.cuda.memory_allocated())


def probe(device: str, hidden: int, layers: int, vocab: int) -> dict[str, Any]:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from wmrl.learner.config import LearnerConfig
    from wmrl.learner.engine import offloadable_states
    from wmrl.learner.grpo import GRPOLearner

    cuda = device == "cuda"
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        config = Qwen3Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=3 * hidden,
                             num_hidden_layers=layers, num_attention_heads=max(hidden // 128, 1),
                             num_key_value_heads=max(hidden // 512, 1), head_dim=min(128, hidden),
                             max_position_embeddings=512, tie_word_embeddings=False, pad_token_id=0)
        torch.manual_seed(0)
        Qwen3ForCausalLM(config).save_pretrained(tmp)
        cfg = LearnerConfig(zero_stage=3, precision="bf16" if cuda else "fp32", lr=1e-4, kl_coef=0.04)
        learner = GRPOLearner(cfg, tmp)
    built_s = time.perf_counter() - started
    optimizer = type(learner.engine.optimizer.optimizer).__name__
    include = offloadable_states(learner.engine)
    first_loss = _step(learner, vocab, seed=1)
    sizes = _state_bytes(learner)
    # What DeepSpeed should move (everything with FusedAdam, else engine.offloadable_states) and the reference.
    states = {"hp_params", "lp_params", "lp_grads", "contiguous_grad_buffer", "optim_states"} if include is None \
        else {x.value for x in include}
    moving = [s for s in sizes if s == "reference" or s in states]
    sums_before = _checksums(learner)
    before = _allocated(cuda)

    t0 = time.perf_counter()
    learner.offload_states()
    offload_s = time.perf_counter() - t0
    offloaded = sorted(s.value for s in learner.engine.optimizer.offloaded_states)
    gathered = sum(p.data.numel() for p in learner.reference.module.parameters())  # whole copies left
    during = _allocated(cuda)
    t0 = time.perf_counter()
    learner.reload_states()
    reload_s = time.perf_counter() - t0
    after = _allocated(cuda)
    sums_after = _checksums(learner)
    second_loss = _step(learner, vocab, seed=2)

    expected = sum(sizes[s] for s in moving)
    checks = {
        "states_moved": offloaded == sorted(states),
        "reference_released": gathered == 0,
        "round_trip_identical": sums_before == sums_after,
        "step_after_reload_finite": bool(torch.isfinite(torch.tensor(second_loss))),
    }
    report: dict[str, Any] = {
        "probe": "offload_zero3", "device": torch.cuda.get_device_name() if cuda else "cpu",
        "torch": torch.__version__, "deepspeed": __import__("deepspeed").__version__,
        "parameters": sum(p.ds_numel for p in learner.engine.module.parameters()), "optimizer": optimizer,
        "offloaded_states": offloaded, "bytes_mib": {k: round(v / MIB, 1) for k, v in sizes.items()},
        "expected_to_leave_mib": round(expected / MIB, 1),
        "reference_gathered_after_offload": gathered,
        "losses": [first_loss, second_loss], "seconds": {"build": round(built_s, 1), "offload": round(offload_s, 3),
                                                         "reload": round(reload_s, 3)},
    }
    if cuda:
        assert before is not None and during is not None and after is not None
        report["allocated_mib"] = {"before": round(before / MIB, 1), "offloaded": round(during / MIB, 1),
                                   "reloaded": round(after / MIB, 1)}
        report["freed_mib"] = round((before - during) / MIB, 1)
        # The allocator frees what nothing references; 90%: DeepSpeed's own small buffers stay.
        checks["freed_what_it_moved"] = before - during >= 0.9 * expected
        checks["memory_back"] = abs(after - before) <= 0.05 * before
        checks["optimizer_is_fused_adam"] = optimizer == "FusedAdam"
    report["checks"] = checks
    report["ok"] = all(checks.values())
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=32000)
    args = parser.parse_args(argv)
    import torch

    device = args.device
    if device == "auto":
        if not torch.cuda.is_available():
            print(json.dumps({"probe": "offload_zero3", "skipped": "no CUDA device (torch.cuda.is_available() is "
                              "False): the offload's bytes need a GPU; --device cpu runs the logic on the CPU"}))
            return 0
        device = "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"probe": "offload_zero3", "ok": False, "error": "--device cuda without a CUDA device"}))
        return 1
    # DeepSpeed's and transformers' logs go to stderr, so that stdout is the one JSON line.
    sys.stdout.flush()
    stdout = os.dup(1)
    os.dup2(2, 1)
    try:
        report = probe(device, args.hidden, args.layers, args.vocab)
    except Exception as err:  # noqa: BLE001 - the probe reports any failure as JSON with exit 1
        report = {"probe": "offload_zero3", "ok": False, "error": f"{type(err).__name__}: {err}"}
    finally:
        sys.stdout.flush()
        os.dup2(stdout, 1)
    print(json.dumps(report))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
