"""The SFT engine: AdamW on the target tokens of packed rows, resumable, cached by content hash.

The output is a plain Hugging Face directory (weights, config, the base model's tokenizer files) in
``<cache>/sft/sft-<hash>``, where the hash covers the base model, the examples and every
hyperparameter that changes the result. Training is a pure function of those: the rows of each
epoch come from :func:`pack_rows` with seed ``sft.seed + epoch``, there is no dropout, and a
checkpoint (weights, optimizer, schedule, step) is written every ``sft.checkpoint_every`` steps to
a work directory next to the output, so a killed run resumes at its last checkpoint and ends with
the same weights as an uninterrupted one.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from wmrl.models.cache import build_hash_of_dir, build_once, cache_root, content_hash
from wmrl.models.loading import load_causal_lm, model_dir
from wmrl.progress import progress_display
from wmrl.sft.config import NOT_HASHED, SFTConfig
from wmrl.sft.example import Row, SFTExample, build_row, examples_digest, pack_rows

RECIPE = "sft-v2"  # v2: kinds with fewer passes are spread over the run (plan_steps)
CHECKPOINT = "checkpoint.pt"
LOG = "sft_log.jsonl"
# Files of the base model copied unchanged next to the trained weights.
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json",
    "vocab.json", "merges.txt", "tokenizer.model", "generation_config.json",
)


class StopTraining(Exception):
    """Raised by ``stop_after`` (tests, benchmarks): leaves the work directory as a kill would."""


def sft_hash(base: Path, examples: Sequence[SFTExample], cfg: SFTConfig) -> str:
    hparams = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in NOT_HASHED}
    return content_hash(
        {"recipe": RECIPE, "base": build_hash_of_dir(base), "examples": examples_digest(examples), "sft": hparams,
         "torch": torch.__version__}
    )


def default_sft_dir(cache_dir: str, digest: str) -> Path:
    return cache_root(cache_dir) / "sft" / f"sft-{digest[:16]}"


def plan_steps(examples: Sequence[SFTExample], cfg: SFTConfig) -> list[list[Row]]:
    """Every optimizer step's rows, epoch after epoch (steps never straddle two epochs).

    The run has as many epochs as the most-trained kind has passes (``sft.epochs``,
    ``sft.epochs_per_kind``). Each kind's rows over all its passes are packed per pass (seed
    ``sft.seed + pass``) and then spread evenly over the run's epochs, so a kind with fewer passes is
    seen all along, not only at the start: one world-model pass front-loaded before 29 agent-only
    epochs was forgotten (every check answer of the SFT'd tiny model was an agent reply, not JSON).
    A kind with as many passes as there are epochs gets exactly one pass per epoch. Row members
    index into ``examples``.
    """
    kinds = sorted({ex.kind for ex in examples})
    n_epochs = max(cfg.epochs_for(k) for k in kinds)
    per_epoch: list[list[Row]] = [[] for _ in range(n_epochs)]
    for kind in kinds:
        chosen = [i for i, ex in enumerate(examples) if ex.kind == kind]
        subset = [examples[i] for i in chosen]
        rows = [Row(r.prefix, tuple(chosen[j] for j in r.members))
                for p in range(cfg.epochs_for(kind)) for r in pack_rows(subset, cfg.pack_tokens, cfg.seed + p)]
        for epoch in range(n_epochs):
            per_epoch[epoch] += rows[epoch * len(rows) // n_epochs: (epoch + 1) * len(rows) // n_epochs]
    steps: list[list[Row]] = []
    for epoch, rows in enumerate(per_epoch):
        random.Random(cfg.seed + epoch).shuffle(rows)  # the kinds interleave inside an epoch
        steps += [rows[i: i + cfg.rows_per_step] for i in range(0, len(rows), cfg.rows_per_step)]
    return steps


def _row_loss(model: Any, packed: Any) -> torch.Tensor:
    """Per-token cross-entropy of the row's targets; the LM head runs on the target positions only."""
    base = getattr(model, model.base_model_prefix)
    hidden = base(
        input_ids=packed.input_ids, position_ids=packed.position_ids, attention_mask=packed.attention_mask
    ).last_hidden_state[0]
    logits = model.get_output_embeddings()(hidden[packed.logit_index]).float()
    return torch.nn.functional.cross_entropy(logits, packed.labels, reduction="none")


def _save_checkpoint(path: Path, step: int, model: Any, opt: Any, sched: Any, log: list[dict]) -> None:
    tmp = path.with_name(f".tmp-{path.name}.{os.getpid()}")
    state = {"step": step, "model": model.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict(),
             "log": log, "rng": torch.get_rng_state()}
    torch.save(state, tmp)
    os.replace(tmp, path)  # a reader (the resumed run) sees the old or the new checkpoint, never half


def train(
    base: Path,
    examples: Sequence[SFTExample],
    cfg: SFTConfig,
    out: Path,
    workdir: Path,
    progress: bool = True,
    stop_after: int | None = None,
) -> dict[str, Any]:
    """Train and write the HF directory into ``out``; returns the facts recorded with the build."""
    from transformers import get_cosine_with_min_lr_schedule_with_warmup


    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    start_time = time.monotonic()
    steps = plan_steps(examples, cfg)
    model = load_causal_lm(base, dtype="float32").train()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = get_cosine_with_min_lr_schedule_with_warmup(
        opt, num_warmup_steps=cfg.warmup_steps, num_training_steps=len(steps), min_lr_rate=cfg.min_lr_ratio
    )
    log: list[dict[str, Any]] = []
    first = 0
    workdir.mkdir(parents=True, exist_ok=True)
    ckpt = workdir / CHECKPOINT
    if ckpt.exists():
        state = torch.load(ckpt, weights_only=False)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        sched.load_state_dict(state["sched"])
        torch.set_rng_state(state["rng"])
        first, log = state["step"], state["log"]
    bar = progress_display(len(steps), "sft", "step", initial=first, show=None if progress else False)
    for step in range(first, len(steps)):
        packed_rows = [build_row(row, examples) for row in steps[step]]
        n_tokens = sum(len(p.labels) for p in packed_rows)
        sums: dict[str, float] = defaultdict(float)
        counts: dict[str, int] = defaultdict(int)
        for packed in packed_rows:
            losses = _row_loss(model, packed)
            (losses.sum() / n_tokens).backward()
            for kind, value in zip(packed.kinds, losses.detach().tolist()):
                sums[kind] += value
                counts[kind] += 1
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip or float("inf"))
        lr = sched.get_last_lr()[0]
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        loss = sum(sums.values()) / n_tokens
        log.append({"step": step + 1, "loss": loss, "lr": lr, "tokens": n_tokens, "grad_norm": float(grad_norm),
                    **{f"loss/{k}": sums[k] / counts[k] for k in sorted(sums)}})
        bar.set_postfix(loss=f"{loss:.3f}")
        bar.update(1)
        done = step + 1
        if cfg.checkpoint_every and done % cfg.checkpoint_every == 0 and done < len(steps):
            _save_checkpoint(ckpt, done, model, opt, sched, log)
        if stop_after is not None and done >= stop_after and done < len(steps):
            bar.close()
            raise StopTraining(f"stopped after step {done} of {len(steps)}")
    bar.close()
    model.save_pretrained(str(out))
    for name in TOKENIZER_FILES:
        if (base / name).is_file():
            shutil.copyfile(base / name, out / name)
    (out / LOG).write_text("".join(json.dumps(entry) + "\n" for entry in log), encoding="utf-8")
    return _facts(base, examples, cfg, steps, log, time.monotonic() - start_time, resumed_at=first)


def final_losses(log: list[dict[str, Any]], window: int = 10) -> dict[str, float]:
    """Per kind, the mean loss over the last ``window`` steps that trained on that kind."""
    out: dict[str, float] = {}
    for key in sorted({k for entry in log for k in entry if k.startswith("loss/")}):
        values = [entry[key] for entry in log if key in entry][-window:]
        out[key] = sum(values) / len(values)
    return out


def _facts(base: Path, examples: Sequence[SFTExample], cfg: SFTConfig, steps: list[list[Row]],
           log: list[dict[str, Any]], seconds: float, resumed_at: int) -> dict[str, Any]:
    return {
        "recipe": RECIPE,
        "base_model": str(base),
        "examples": len(examples),
        "examples_per_kind": {k: sum(1 for e in examples if e.kind == k) for k in sorted({e.kind for e in examples})},
        "steps": len(steps),
        "trained_tokens": sum(row.length(examples) for rows in steps for row in rows),
        "first_loss": log[0]["loss"] if log else None,
        "final_loss": final_losses(log),
        "seconds": round(seconds, 3),
        "resumed_at_step": resumed_at,
        "sft": dataclasses.asdict(cfg),
    }


def run_sft(
    base: str | Path,
    examples: Sequence[SFTExample],
    cfg: SFTConfig,
    cache_dir: str = "",
    progress: bool = True,
    stop_after: int | None = None,
) -> tuple[Path, bool]:
    """Train ``base`` on ``examples`` unless the cache holds that result; returns ``(dir, trained_now)``."""
    base = model_dir(base)
    if not examples:
        raise ValueError("wmrl sft got no examples")
    digest = sft_hash(base, examples, cfg)
    out = Path(cfg.out).expanduser() if cfg.out else default_sft_dir(cache_dir, digest)
    workdir = out.parent / f".work-{out.name}-{digest[:16]}"
    result = build_once(out, digest, lambda tmp: train(base, examples, cfg, tmp, workdir, progress, stop_after))
    if result[1]:
        shutil.rmtree(workdir, ignore_errors=True)  # our own checkpoints, no longer needed
    return result
