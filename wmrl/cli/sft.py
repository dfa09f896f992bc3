"""``wmrl sft``: the supervised warm start of the tiny default (cached by content hash, resumable).

    wmrl sft                                        # the tiny default's model init (cached) + examples + SFT
    wmrl sft configs/train.yaml sft.epochs=4
    wmrl sft --base /path/to/hf-model               # SFT another local model on the same examples
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from wmrl.cli.args import IntermixedParser, add_config_args, split_config_args
from wmrl.config import load_config
from wmrl.configs import TINY_CONFIG as DEFAULT_CONFIG
from wmrl.models.cache import MARKER
from wmrl.models.loading import model_dir
from wmrl.sft.pipeline import sft_default_model


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("sft", help="supervised warm start: agent replies + world-model JSON")
    parser.__class__ = IntermixedParser  # overrides may follow the options
    add_config_args(parser, "YAML config (default: wmrl train's tiny.yaml)")
    parser.add_argument("--base", default=None, help="local HF model to train (default: the tiny model, built)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    started = time.monotonic()

    config, overrides = split_config_args(args.args)
    # Without CONFIG: the same packaged default as `wmrl train`, so both find the same cached SFT.
    cfg = load_config(config or str(DEFAULT_CONFIG), overrides)
    base = model_dir(args.base) if args.base else None
    path, trained = sft_default_model(cfg, base=base, progress=not args.quiet)
    facts = json.loads((Path(path) / MARKER).read_text(encoding="utf-8"))
    losses = ", ".join(f"{k.removeprefix('loss/')} {v:.3f}" for k, v in facts["final_loss"].items())
    how = f"trained ({facts['steps']} steps, {facts['seconds'] / 60:.1f} min)" if trained else "cached"
    print(f"{how}: {path}")
    print(f"  final-epoch loss: {losses} (first step {facts['first_loss']:.3f}); "
          f"total {(time.monotonic() - started) / 60:.1f} min")
    return 0
