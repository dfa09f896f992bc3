"""``wmrl model init``: build the tiny Qwen3 model with its locally trained tokenizer (cached).

    wmrl model init                                  # into ~/.cache/wmrl/models/qwen3-tiny-v1-<hash>
    wmrl model init --out /tmp/tiny model.tiny.hidden_size=128
    wmrl model init configs/train.yaml tasks.root=/shared/wmrl/tasks
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from wmrl.cli.args import add_config_args, split_config_args
from wmrl.config import load_config
from wmrl.models.init import ensure_tiny_model


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("model", help="build the tiny default model (wmrl model init)")
    sub = parser.add_subparsers(dest="model_command", required=True, metavar="ACTION")
    init = sub.add_parser("init", help="tiny Qwen3 + byte-level BPE trained on the pool, as an HF directory")
    add_config_args(init)
    init.add_argument("--out", default=None, help="output directory (default: the cache, by content hash)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    config, overrides = split_config_args(args.args)
    cfg = load_config(config, overrides)
    path, built = ensure_tiny_model(cfg.model, cfg.tasks, Path(args.out) if args.out else None)
    facts = json.loads((path / "wmrl_build.json").read_text(encoding="utf-8"))
    how = f"built in {facts['seconds']:.1f} s" if built else "cached"
    print(f"{how}: {path}")
    print(f"  {facts['parameters']:,} parameters, tokenizer vocab {facts['tokenizer_vocab']}, "
          f"corpus {facts['corpus_texts']} texts / {facts['corpus_chars']:,} chars")
    return 0
