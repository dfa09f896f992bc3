"""Benchmark: peak memory and seconds of the loss head, full vs chunked (wmrl/learner/head.py), on CPU.

One case = forward + backward of ``sum_t (a_t log pi(token_t) + c_t H_t)`` over ``tokens`` loss positions
through an LM head ``hidden -> vocab`` (fp32, random weights; the decoder is left out: it is the same in
both):

- ``full``: the head as it was, ``token_log_probs(lm_head(hidden) / T)`` over all positions at once
  (``tokens x vocab`` logits, log-softmax, its exp and their product);
- ``chunked``: ``head.policy_tokens`` with ``loss_chunk_tokens = chunk`` (checkpointed chunks).

Each case runs in a fresh subprocess; its peak is the process's peak resident set (``ru_maxrss``) minus
its resident set just before the head (weights, hidden states and targets allocated), so the figure is
what the head itself adds, gradients included (glibc's mmap threshold is fixed, so freed buffers leave
the RSS). A full case whose predicted peak does not fit in
the machine's available memory is skipped and recorded with the prediction (so is a chunked one); the
full head's cost per ``token x vocab`` is fitted on the cases that fit (it is linear in the length).

    nice -n 19 python benchmarks/bench_loss_head.py [--vocab 151936] [--hidden 256]
        [--full-tokens 512,1024,2048,8192] [--chunked 2048:1024,8192:256,...] [--threads 1]

Writes results/bench_loss_head.json and results/bench_loss_head.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "results"
# Bytes per (row x vocab) a case is assumed to need, to skip what cannot fit in this machine's memory.
BYTES_GUESS = {"full": 28.0, "chunked": 16.0}


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _available_bytes() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


def run_case(mode: str, tokens: int, chunk: int, vocab: int, hidden: int, temperature: float,
             threads: int) -> dict[str, Any]:
    """One forward + backward in this process; returns the head's added peak memory and seconds."""
    import torch

    from wmrl.learner import head

    def forward_backward(lm_head: torch.nn.Module, n: int) -> torch.Tensor:
        h = torch.randn(n, lm_head.in_features, requires_grad=True)
        targets = torch.randint(0, lm_head.out_features, (n,))
        a, c = torch.randn(n), torch.randn(n)
        if mode == "full":
            logp, entropy = head.token_log_probs(lm_head(h) / temperature, targets)
        else:
            out = head.policy_tokens(lm_head, h, targets, temperature, chunk)
            logp, entropy = out.logp, out.entropy
        (a * logp + c * entropy).sum().backward()
        return h.grad

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    forward_backward(torch.nn.Linear(8, 16, bias=False), 4)  # first-call set-up (autograd, checkpoint) untimed
    lm_head = torch.nn.Linear(hidden, vocab, bias=False)
    before = _rss_bytes()
    started = time.perf_counter()
    grad = forward_backward(lm_head, tokens)
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    return {"mode": mode, "tokens": tokens, "chunk": chunk if mode == "chunked" else None, "vocab": vocab,
            "hidden": hidden, "seconds": seconds, "head_peak_bytes": peak - before,
            "grad_finite": bool(torch.isfinite(grad).all() and torch.isfinite(lm_head.weight.grad).all()),
            "load_avg_1min": os.getloadavg()[0]}


def _subprocess(case: dict[str, Any]) -> dict[str, Any]:
    # A fixed mmap threshold: glibc otherwise raises it (up to 32 MB) after each large free, and freed
    # chunk buffers then stay in the heap and in the RSS although nothing holds them.
    env = dict(os.environ, PYTHONPATH=str(REPO), MALLOC_MMAP_THRESHOLD_="131072")
    done = subprocess.run([sys.executable, __file__, "--case", json.dumps(case)], env=env, check=True,
                          capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _fit_per_cell(rows: list[dict[str, Any]]) -> float | None:
    """Least-squares slope (through 0) of the full head's peak against tokens x vocab."""
    cells = [(r["tokens"] * r["vocab"], r["head_peak_bytes"])
             for r in rows if r["mode"] == "full" and "skipped" not in r]
    if not cells:
        return None
    return sum(x * y for x, y in cells) / sum(x * x for x, _ in cells)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--full-tokens", default="512,1024,2048,8192")
    ap.add_argument("--chunked", default="2048:1024,8192:1024,8192:4096",
                    help="tokens:chunk,...")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--case", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.case:
        print(json.dumps(run_case(**json.loads(args.case))))
        return

    common = {"vocab": args.vocab, "hidden": args.hidden, "temperature": args.temperature, "threads": args.threads}
    cases = [{"mode": "full", "tokens": int(n), "chunk": 0} for n in args.full_tokens.split(",")]
    cases += [{"mode": "chunked", "tokens": int(n), "chunk": int(c)}
              for n, c in (item.split(":") for item in args.chunked.split(","))]
    rows = []
    for case in cases:
        rows_at_once = case["tokens"] if case["mode"] == "full" else min(case["chunk"], case["tokens"])
        predicted = BYTES_GUESS[case["mode"]] * rows_at_once * args.vocab
        available = _available_bytes()
        if predicted > 0.7 * available:
            rows.append({**case, "chunk": case["chunk"] or None, "vocab": args.vocab, "hidden": args.hidden,
                         "skipped": f"predicted {predicted / 2**30:.1f} GiB > 70% of the "
                                    f"{available / 2**30:.1f} GiB available"})
        else:
            rows.append(_subprocess({**case, **common}))
        print(json.dumps(rows[-1]), flush=True)
        write_report(rows, args, sys.argv[1:])  # after every case: a long run that is stopped keeps its rows


def write_report(rows: list[dict[str, Any]], args: argparse.Namespace, argv: list[str]) -> None:
    per_cell = _fit_per_cell(rows)
    for r in rows:
        if "skipped" in r:
            if r["mode"] == "full" and per_cell is not None:
                r["extrapolated_head_peak_bytes"] = per_cell * r["tokens"] * r["vocab"]
        elif r["mode"] == "chunked":
            r["bytes_per_chunk_cell"] = r["head_peak_bytes"] / (r["chunk"] * r["vocab"])
    measured_full = {r["tokens"]: r for r in rows if r["mode"] == "full" and "skipped" not in r}
    time_ratios = [
        {"tokens": r["tokens"], "chunk": r["chunk"],
         "chunked_over_full": r["seconds"] / measured_full[r["tokens"]]["seconds"]}
        for r in rows if r["mode"] == "chunked" and "skipped" not in r and r["tokens"] in measured_full
    ]
    command = "nice -n 19 python benchmarks/bench_loss_head.py " + " ".join(argv)
    report = {"rows": rows, "full_bytes_per_token_vocab": per_cell, "time_ratios": time_ratios,
              "temperature": args.temperature, "threads": args.threads, "host": platform.node(),
              "cpus": os.cpu_count(), "load_avg_after": os.getloadavg(), "command": command.strip()}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "bench_loss_head.json").write_text(json.dumps(report, indent=1) + "\n")
    (RESULTS / "bench_loss_head.md").write_text(_markdown(report, args))


def _load(row: dict[str, Any]) -> str:
    return f"{row['load_avg_1min']:.1f}" if "load_avg_1min" in row else "-"


def _markdown(report: dict[str, Any], args: argparse.Namespace) -> str:
    gib = 2**30
    lines = [
        "# Loss head: peak memory of full vs chunked (CPU)",
        "",
        f"LM head {args.hidden} -> {args.vocab} (fp32), forward + backward of log-prob and entropy terms at "
        f"T = {args.temperature}; each case in a fresh process, peak = peak RSS minus RSS before the head "
        f"(gradients included). Host `{report['host']}`, {report['cpus']} CPUs shared with other work, "
        f"{args.threads} torch thread(s); load average after: "
        + ", ".join(f"{x:.1f}" for x in report["load_avg_after"]) + ".",
        "",
        ("| head | loss tokens | chunk | peak added (GiB) | bytes / (token or chunk row x vocab) | seconds "
        "| load avg (1 min) at its end |"),
        "|---|---|---|---|---|---|---|",
    ]
    for r in report["rows"]:
        cells = r["tokens"] * r["vocab"] if r["mode"] == "full" else (r["chunk"] or 0) * r["vocab"]
        if "skipped" in r:
            extra = r.get("extrapolated_head_peak_bytes")
            peak = f"not run ({r['skipped']}); linear fit: {extra / gib:.1f}" if extra else f"not run ({r['skipped']})"
            lines.append(f"| {r['mode']} | {r['tokens']} | {r['chunk'] or '-'} | {peak} | - | - | - |")
            continue
        lines.append(f"| {r['mode']} | {r['tokens']} | {r['chunk'] or '-'} | {r['head_peak_bytes'] / gib:.2f} | "
                     f"{r['head_peak_bytes'] / cells:.1f} | {r['seconds']:.1f} | {_load(r)} |")
    per_cell = report["full_bytes_per_token_vocab"]
    if per_cell:
        lines += ["", (f"Full head: {per_cell:.1f} bytes per token x vocab (least-squares over the measured "
                      "lengths): the whole sequence's logits and their softmax live at once. Chunked: the peak "
                      "follows the chunk, not the number of loss tokens.")]
    for r in report["rows"]:
        same = [c for c in report["rows"]
                if c["mode"] == "chunked" and c["tokens"] == r["tokens"] and "skipped" not in c]
        if r["mode"] == "full" and "extrapolated_head_peak_bytes" in r and same:
            lines.append(f"\nAt {r['tokens']} loss tokens: full head "
                         f"~{r['extrapolated_head_peak_bytes'] / gib:.1f} GiB (linear fit; more than this machine "
                         "has), chunked "
                         + ", ".join(f"{c['head_peak_bytes'] / gib:.2f} GiB (chunk {c['chunk']})" for c in same) + ".")
    for t in report["time_ratios"]:
        lines.append(f"\nTime, chunked (chunk {t['chunk']}) / full at {t['tokens']} tokens: "
                     f"{t['chunked_over_full']:.2f} (the chunk's logits are computed twice: forward and recompute; "
                     "wall times on a shared machine, see the load column).")
    lines += ["", f"Command: `{report['command']}`", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
