"""Peak memory of the chunked loss head (wmrl/learner/head.py), one policy forward + backward, measured.

The head (a ``Linear(hidden, vocab)``) runs ``policy_tokens`` on ``positions`` random hidden states in
chunks of ``chunk`` rows and back-propagates log-prob + entropy, as the learner's loss does; the peak
above what existed before (the head's weight, the inputs) is compared with ``wmrl plan``'s
``loss_head_bytes`` for the same sizes.

- cuda: ``torch.cuda.max_memory_allocated`` above the allocation before the call.
- cpu: the resident high-water mark (``VmHWM``, reset through ``/proc/self/clear_refs``) above the
  resident set before the call, in a process started with ``MALLOC_MMAP_THRESHOLD_`` fixed at 64 KiB:
  glibc then maps every buffer of the head on its own and unmaps it when torch frees it, so the
  resident set follows torch's allocations (without it, freed buffers stay in malloc's heap and the
  dynamic mmap threshold hides the peak). The script re-executes itself with that variable.

    python scripts/measure_loss_head.py [--device cpu|cuda] [--case fp32:16384:512:64:2048 ...]
        # PRECISION:VOCAB:CHUNK:HIDDEN:POSITIONS; prints one JSON object per case
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MMAP_THRESHOLD = "65536"


def status_kb(field: str) -> int:
    """A ``/proc/self/status`` field in KiB (VmRSS, VmHWM)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def measure(device: str, precision: str, vocab: int, chunk: int, hidden: int, positions: int) -> dict[str, Any]:
    """The head's measured peak (bytes) beside the plan's figure for the same sizes."""
    import torch

    from wmrl.learner.head import policy_tokens
    from wmrl.planning.memory import loss_head_bytes

    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[precision]
    torch.manual_seed(0)
    head = torch.nn.Linear(hidden, vocab, bias=False, dtype=dtype, device=device)
    states = torch.randn(positions, hidden, dtype=dtype, device=device)
    targets = torch.randint(0, vocab, (positions,), device=device)

    def step(rows: int) -> None:
        x = states[:rows].detach().requires_grad_(True)
        out = policy_tokens(head, x, targets[:rows], 1.0, chunk)
        (out.logp.sum() + out.entropy.sum() + out.padding).backward()
        head.weight.grad = None

    step(2)  # one-time buffers of the kernels (and the first call's allocations) before the baseline
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    else:
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
        before = status_kb("VmRSS") * 1024
    started = time.perf_counter()
    step(positions)
    if device == "cuda":
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - before
    else:
        peak = status_kb("VmHWM") * 1024 - before
    planned = loss_head_bytes(chunk, positions, vocab, hidden, precision)
    return {"device": device, "precision": precision, "vocab": vocab, "chunk": chunk, "hidden": hidden,
            "positions": positions, "measured_bytes": peak, "planned_bytes": planned,
            "planned_over_measured": round(planned / peak, 4),
            "measured_bytes_per_chunk_element": round(peak / (chunk * vocab), 3),
            "seconds": round(time.perf_counter() - started, 2)}


def _case(text: str) -> tuple[str, int, int, int, int]:
    precision, *sizes = text.split(":")
    if precision not in ("bf16", "fp32") or len(sizes) != 4:
        raise argparse.ArgumentTypeError(f"--case {text!r}: PRECISION:VOCAB:CHUNK:HIDDEN:POSITIONS, "
                                         "PRECISION bf16 or fp32")
    vocab, chunk, hidden, positions = (int(x) for x in sizes)
    return precision, vocab, chunk, hidden, positions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--case", type=_case, action="append", metavar="PRECISION:VOCAB:CHUNK:HIDDEN:POSITIONS",
                        help="one measurement (repeatable); default fp32:16384:512:64:2048")
    args = parser.parse_args(argv)
    if args.device == "cpu" and os.environ.get("MALLOC_MMAP_THRESHOLD_") != MMAP_THRESHOLD:
        env = dict(os.environ, MALLOC_MMAP_THRESHOLD_=MMAP_THRESHOLD)
        os.execve(sys.executable, [sys.executable, __file__, *(argv if argv is not None else sys.argv[1:])], env)
    for case in args.case or [_case("fp32:16384:512:64:2048")]:
        print(json.dumps(measure(args.device, *case)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
