"""``wmrl train [CONFIG] [key=value ...]``: train an LLM research agent with WMRL.

Without CONFIG it trains the embedded default (``wmrl/configs/tiny.yaml``: a tiny agent on the CPU,
the built-in task pool, local workers, a local MLflow store); with one, e.g.
``configs/qwen3.5-4b.yaml model.path=/shared/models/Qwen3.5-4B``, it runs that (``launch.executor=slurm``
submits the coordinator and the anchor workers). The initial policy is ``model.path``, or, when empty,
the tiny default built and warm-started here first (``wmrl model init`` + ``wmrl sft``, both cached, with
progress). Everything else is ``wmrl launch``: the run directory, resume of an existing run with the same
config, ``--wait``, ``--resume``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from wmrl.cli import launch
from wmrl.cli.args import IntermixedParser, add_command, add_config_args, split_config_args
from wmrl.config import ConfigError, load_config
from wmrl.configs import TINY_CONFIG as DEFAULT_CONFIG
from wmrl.sft.pipeline import INITIAL_POLICY
from wmrl.trainer_registry import TRAINERS, build_initial_policy, trains_an_agent


def register(subparsers: Any) -> None:
    parser = add_command(
        subparsers, "train", "train an LLM research agent with WMRL (default: the tiny CPU agent)",
        __doc__)
    parser.__class__ = IntermixedParser  # options and key=value overrides in any order
    add_config_args(parser, f"YAML config (default {DEFAULT_CONFIG.name}, packaged with wmrl)")
    parser.add_argument("--wait", action="store_true", help="slurm: block until the run has ended")
    parser.add_argument("--every", type=float, default=15.0, metavar="S", help="status interval of --wait")
    parser.add_argument("--resume", action="store_true", help="continue a cancelled run from its checkpoint")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    config, overrides = split_config_args(args.args)
    config = config or str(DEFAULT_CONFIG)
    cfg = load_config(config, overrides)
    if not trains_an_agent(cfg.trainer):
        agents = ", ".join(name for name in TRAINERS if trains_an_agent(name))
        raise ConfigError(f"trainer={cfg.trainer!r}: `wmrl train` trains an agent from an initial policy "
                          f"(trainer: {agents}); run the other trainers with `wmrl launch CONFIG`")
    if not cfg.model.path:
        pin = Path(cfg.run_dir) / INITIAL_POLICY
        if pin.is_file():  # a relaunch keeps the policy it started with; `wmrl launch` checks the rest
            print(f"initial policy: pinned in {pin}", flush=True)
        else:
            print("initial policy: the tiny default (wmrl model init + wmrl sft; cached after the first run)",
                  flush=True)
            # Progress even into a log file: the first run spends ~15 minutes here (variants, then SFT).
            path = build_initial_policy(cfg.trainer, cfg)
            print(f"initial policy: {path}", flush=True)
    return launch.run(argparse.Namespace(config=config, overrides=overrides, wait=args.wait,
                                         every=args.every, resume=args.resume, no_submit=False))
