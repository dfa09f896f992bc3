"""The tiny default policy end to end: ``wmrl model init`` -> SFT examples -> ``wmrl sft``, all cached.

``model.path`` set: that checkpoint is the initial policy and nothing is built. Empty: the tiny model
for the config is built (or found), the agent's and world model's SFT examples are rendered with the
run's own prompts (:func:`wmrl.sft.data.build_sft_data`), and the SFT result is the initial policy;
the world model is a frozen copy of it (paper: the initial policy's backbone).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from wmrl.config import WMRLConfig


def sft_default_model(cfg: WMRLConfig, base: Path | None = None, progress: bool = True,
                      log: Any = print) -> tuple[Path, bool]:
    """Build the tiny model (unless ``base`` is given), its SFT examples, and train; ``(dir, trained_now)``."""
    from wmrl.models.init import ensure_tiny_model
    from wmrl.models.loading import load_tokenizer
    from wmrl.sft.data import build_sft_data
    from wmrl.sft.engine import run_sft

    started = time.monotonic()
    if base is None:
        base, built = ensure_tiny_model(cfg.model, cfg.tasks.root)
        log(f"base model: {base} ({'built' if built else 'cached'}, {time.monotonic() - started:.0f} s)")
    data = build_sft_data(cfg, load_tokenizer(base), max_tokens=cfg.sft.pack_tokens, progress=progress)
    counts = ", ".join(f"{n} {kind}" for kind, n in sorted(data.counts.items()))
    skipped = ", ".join(f"{n} {kind}" for kind, n in sorted(data.skipped.items())) or "none"
    log(f"examples: {counts}; skipped as longer than sft.pack_tokens={cfg.sft.pack_tokens}: {skipped} "
        f"({time.monotonic() - started:.0f} s)")
    return run_sft(base, data.examples, cfg.sft, cache_dir=cfg.model.cache_dir, progress=progress)


def initial_policy_path(cfg: WMRLConfig, progress: bool = True, log: Any = print) -> Path:
    """``model.path`` if set, else the tiny default after SFT (built on first use)."""
    from wmrl.models.loading import model_dir

    if cfg.model.path:
        return model_dir(cfg.model.path)
    return sft_default_model(cfg, progress=progress, log=log)[0]
