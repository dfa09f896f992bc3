"""The tiny default policy end to end: ``wmrl model init`` -> SFT examples -> ``wmrl sft``, all cached.

``model.path`` set: that checkpoint is the initial policy and nothing is built. Empty: the tiny model
for the config is built (or found), the agent's and world model's SFT examples are rendered with the
run's own prompts (:func:`wmrl.sft.data.build_sft_data`), and the SFT result is the initial policy;
the world model is a frozen copy of it (paper: the initial policy's backbone).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from wmrl.io import atomic_write_json, read_json
from wmrl.models.cache import MARKER, built_hash
from wmrl.models.init import ensure_tiny_model
from wmrl.models.loading import load_tokenizer, model_dir
from wmrl.sft.config import SFTRunConfig


def sft_default_model(cfg: SFTRunConfig, base: Path | None = None, progress: bool = True,
                      log: Any = print) -> tuple[Path, bool]:
    """Build the tiny model (unless ``base`` is given), its SFT examples, and train; ``(dir, trained_now)``."""
    # torch (the SFT engine, the policy's prompts), only when an SFT is built
    from wmrl.sft.data import build_sft_data
    from wmrl.sft.engine import run_sft

    started = time.monotonic()
    if base is None:
        base, built = ensure_tiny_model(cfg.model, cfg.tasks)
        log(f"base model: {base} ({'built' if built else 'cached'}, {time.monotonic() - started:.0f} s)")
    examples_started = time.monotonic()
    data = build_sft_data(cfg, load_tokenizer(base), max_tokens=cfg.sft.pack_tokens, progress=progress)
    counts = ", ".join(f"{n} {kind}" for kind, n in sorted(data.counts.items()))
    skipped = ", ".join(f"{n} {kind}" for kind, n in sorted(data.skipped.items())) or "none"
    log(f"examples: {counts}; skipped as longer than sft.pack_tokens={cfg.sft.pack_tokens}: {skipped} "
        f"({time.monotonic() - examples_started:.0f} s)")
    return run_sft(base, data.examples, cfg.sft, cache_dir=cfg.model.cache_dir, progress=progress)


# The sections of a run config the tiny default's SFT reads (SFTRunConfig).
SFT_SECTIONS = ("model", "tasks", "sandbox", "agent", "world_model", "sft")
# The tiny default resolved in this process, by those sections: `wmrl train` resolves it (with progress)
# before the local coordinator, in the same process, pins it; resolving it again probed the sandbox and
# rendered every SFT example only to find the cached SFT, and printed its lines twice.
_RESOLVED: dict[str, Path] = {}


def initial_policy_path(cfg: SFTRunConfig, progress: bool = True, log: Any = print) -> Path:
    """``model.path`` if set, else the tiny default after SFT (built on first use)."""
    import dataclasses


    if cfg.model.path:
        return model_dir(cfg.model.path)
    key = json.dumps({name: dataclasses.asdict(getattr(cfg, name)) for name in SFT_SECTIONS}, sort_keys=True,
                     default=str)
    known = _RESOLVED.get(key)
    if known is not None and (known / MARKER).is_file():
        return known
    _RESOLVED[key] = path = sft_default_model(cfg, progress=progress, log=log)[0]
    return path


INITIAL_POLICY = "initial_policy.json"


def read_pinned_initial_policy(run_dir: Path, log: Any = print) -> Path | None:
    """The initial policy pinned in ``RUN_DIR/initial_policy.json`` (None: not pinned yet), checked: still
    there, and not rebuilt with other content since."""
    pin = Path(run_dir) / INITIAL_POLICY
    if not pin.is_file():
        return None
    record = read_json(pin)
    path = Path(record["path"])
    if not (path / "config.json").is_file():
        raise RuntimeError(f"the run's initial policy {path} (pinned in {pin}) is gone; restore it, "
                           "or start a new run")
    if record.get("build_hash") and built_hash(path) != record["build_hash"]:
        raise RuntimeError(f"the run's initial policy {path} (pinned in {pin}) was rebuilt with other "
                           f"content ({built_hash(path)} != {record['build_hash']}); start a new run")
    log(f"initial policy: {path} (pinned at the run's first start)")
    return path


def initial_policy_label(run_dir: Path) -> str | None:
    """The pinned initial policy as a run's tag shows it: its directory name, with its build hash where the
    name does not already carry it (``sft-3cc97f37219cbc82``; ``Qwen3.5-4B``; ``my-sft@0123456789abcdef``).
    None before the pin exists (a trainer without an LLM policy)."""
    pin = Path(run_dir) / INITIAL_POLICY
    if not pin.is_file():
        return None
    record = read_json(pin)
    name, digest = Path(record["path"]).name, (record.get("build_hash") or "")[:16]
    return name if not digest or digest in name else f"{name}@{digest}"


def pinned_initial_policy(cfg: SFTRunConfig, run_dir: Path, log: Any = print) -> Path:
    """The run's initial policy (the learner's start, the KL reference and, by default, the world model),
    chosen at the run's first launch and pinned in ``RUN_DIR/initial_policy.json``.

    A relaunched run reads the pin instead of resolving the config again: a newer wmrl whose SFT recipe
    changed, or a rebuilt cache, would otherwise give it another reference and world model mid-run.
    The coordinator calls this before it builds the trainer (every launch route); the trainer only reads
    the pin (:func:`read_pinned_initial_policy`).
    """
    pinned = read_pinned_initial_policy(run_dir, log)
    if pinned is not None:
        return pinned
    path = initial_policy_path(cfg, progress=False, log=log)
    atomic_write_json(Path(run_dir) / INITIAL_POLICY, {"path": str(path), "build_hash": built_hash(path)})
    return path
