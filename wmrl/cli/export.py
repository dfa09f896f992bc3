"""``wmrl export RUN_DIR [--step N] OUT``: a learner checkpoint as a plain Hugging Face model directory."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "export", help="write a trained policy as a Hugging Face model directory (transformers, vLLM)"
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run directory, or one learner checkpoint directory")
    parser.add_argument("out", metavar="OUT", help="new directory to write (config, safetensors, tokenizer)")
    parser.add_argument("--step", type=int, default=None, help="the step's checkpoint (default: the newest)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # torch (the learner's checkpoints): not on `wmrl --help`'s path
    from wmrl.learner.checkpoint import read_meta
    from wmrl.learner.export import export_checkpoint, find_checkpoint

    try:
        checkpoint = find_checkpoint(Path(args.run_dir), args.step)
        out = export_checkpoint(checkpoint, Path(args.out))
    except (ValueError, FileExistsError, FileNotFoundError) as err:
        print(f"wmrl export: {err}", file=sys.stderr)
        return 2
    meta = read_meta(checkpoint)
    print(f"exported step {meta['step']} ({checkpoint}) to {out}")
    if not any((out / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
        print(f"note: the initial model {meta['reference_model']} had no tokenizer files; copy them into {out}",
              file=sys.stderr)
    print(f"load it with: AutoModelForCausalLM.from_pretrained({str(out)!r}) or vllm serve {out}")
    return 0
