"""``wmrl eval MODEL_OR_RUN [--pool heldout|train] [--k 8] [--step N]``: the paper's metric for a policy.

avg@k, really executed, per task, then per category, then over categories: the same evaluation code
``wmrl train`` runs before, during and after training (:func:`wmrl.evaluation.evaluate_split`, same RNG
stream), so a run's checkpoint evaluated here with the run's seed and k gives the run's own numbers.

MODEL_OR_RUN is a run directory (its config, its learner checkpoint of ``--step``, default the newest,
exported to a temporary Hugging Face directory) or a Hugging Face model directory (evaluated with CONFIG
or the tiny default's config and ``key=value`` overrides; a directory ``wmrl export`` wrote records its step,
whose evaluation stream it repeats, so it gives the run's numbers too). Executions run here, ``launch.workers`` at a
time, in the configured sandbox. Writes a Markdown table to stdout and the whole report as JSON
(``--out``, default ``RUN/evals-cli/...json`` or ``./wmrl-eval-...json``), progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from wmrl.cli.args import add_command, add_config_args, split_config_args
from wmrl.config import ConfigError, load_config
from wmrl.configs import TINY_CONFIG
from wmrl.evaluation import evaluate_split
from wmrl.execution.executed import ExecutedEnvironment
from wmrl.execution.work import config_work
from wmrl.scores import check_score
from wmrl.storage.records import ExecutionOutcomeRecord
from wmrl.storage.rundir import RunDir
from wmrl.tasks.overview import task_overview
from wmrl.tasks.pool import load_pool, resolve_pool_root


def register(subparsers: Any) -> None:
    parser = add_command(
        subparsers, "eval", "avg@k of a model or a run's checkpoint, really executed",
        __doc__)
    parser.add_argument("target", metavar="MODEL_OR_RUN", help="a run directory or a Hugging Face model directory")
    add_config_args(parser, "for a model directory: YAML config (default: the tiny default)")
    parser.add_argument("--pool", choices=("heldout", "train"), default="heldout", help="which split to evaluate")
    parser.add_argument("--k", type=int, default=None, help="trajectories per task (default: train.eval_k)")
    parser.add_argument("--step", type=int, default=None,
                        help="a run's checkpoint step (default: the newest); for a model directory, the step "
                             "whose evaluation stream to draw (default: the step `wmrl export` recorded, else 0)")
    parser.add_argument("--tasks", type=int, default=None,
                        help="evaluate the first N tasks of the split (default: train.eval_tasks; 0 = all)")
    parser.add_argument("--out", default=None, help="where to write the JSON report")
    parser.set_defaults(func=run)


class LocalRunner:
    """Executions in this process, ``workers`` at a time (the runner of an ExecutedEnvironment)."""

    def __init__(self, work: Any, workers: int) -> None:
        self.work, self.workers = work, max(1, workers)
        self.stop_event = threading.Event()  # never set: `wmrl eval` waits in its main thread (Ctrl-C ends it)

    def execute(self, requests: list[Any], timeout_s: float) -> dict[str, Any]:
        def one(request: Any) -> ExecutionOutcomeRecord:
            started, t0 = time.time(), time.monotonic()
            try:
                payload = self.work(request)
                score, status, error = check_score(payload.get("score")), "done", None
            except Exception as err:  # noqa: BLE001 - an infrastructure failure: no score, counted
                payload, score, status, error = {}, None, "failed", f"{type(err).__name__}: {err}"
            return ExecutionOutcomeRecord(request.request_id, request.run_id, status, score, payload, "local", 1,
                                          started, time.time(), time.monotonic() - t0, error)

        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            return {r.request_id: r for r in pool.map(one, requests)}


def _policy_source(target: Path, args: argparse.Namespace, scratch: Path) -> tuple[Any, Path, int, Path]:
    """(config, model directory, step, default output path) for a run directory or a model directory."""
    if (target / "config.json").is_file():  # a Hugging Face model directory (a run keeps config.yaml)
        # torch (the learner's checkpoints, the policy): not on `wmrl --help`'s path
        from wmrl.learner.export import EXPORT_RECORD

        # For a model, --step picks the evaluation's random stream (that of a run after N steps); a model
        # `wmrl export` wrote carries its step, so its evaluation repeats the run's own at that step.
        record = target / EXPORT_RECORD
        exported = json.loads(record.read_text())["step"] if record.is_file() else 0
        step = args.step if args.step is not None else int(exported)
        config, overrides = split_config_args(args.args)
        if config is None:
            config = str(TINY_CONFIG)
        cfg = load_config(config, [*overrides, f"model.path={target}"])
        return cfg, target, step, Path.cwd() / f"wmrl-eval-{target.name}-{args.pool}.json"
    if args.args:
        raise ConfigError(f"{target} is a run directory: it is evaluated with its own config; "
                          f"drop {' '.join(args.args)}")
    # torch (the learner's checkpoints, the policy): not on `wmrl --help`'s path
    from wmrl.learner.checkpoint import read_meta
    from wmrl.learner.export import export_checkpoint, find_checkpoint

    run = RunDir.open(target)
    cfg = load_config(run.config_path)
    checkpoint = find_checkpoint(target, args.step)
    meta = read_meta(checkpoint)
    model = export_checkpoint(checkpoint, scratch / "model")  # with the initial model's tokenizer files
    step = int(meta["step"])
    return cfg, model, step, target / "evals-cli" / f"{args.pool}-step{step}.json"


def run(args: argparse.Namespace) -> int:
    # torch (the learner's checkpoints, the policy): not on `wmrl --help`'s path
    from wmrl.agent.policy import AgentPolicy
    from wmrl.generation.factory import build_generator
    from wmrl.sft.data import run_context

    target = Path(args.target)
    if not target.is_dir():
        raise ConfigError(f"MODEL_OR_RUN={str(target)!r} is not a directory; give a run directory or a "
                          "Hugging Face model directory")
    with tempfile.TemporaryDirectory(prefix="wmrl-eval-") as tmp:
        cfg, model, step, default_out = _policy_source(target, args, Path(tmp))
        k = args.k if args.k is not None else cfg.train.eval_k
        limit = args.tasks if args.tasks is not None else cfg.train.eval_tasks
        if k < 1:
            raise ConfigError(f"--k={k}: evaluation needs at least one trajectory per task")
        every = load_pool(resolve_pool_root(cfg.tasks, progress=True), "all")
        tasks = [t for t in every if t.split == args.pool][: limit or None]
        if not tasks:
            raise ConfigError(f"--pool={args.pool}: the pool at {cfg.tasks.root or 'the built-in root'} has no such task")
        say = lambda line: print(f"{time.strftime('%H:%M:%S')} eval: {line}", file=sys.stderr, flush=True)
        say(f"policy {model} (step {step}), {len(tasks)} {args.pool} tasks, k={k}, seed {cfg.algorithm.seed}")
        agent_ctx, _, _ = run_context(cfg)
        generator = build_generator(model, cfg.generation, cfg.model.dtype)
        policy = AgentPolicy(generator, cfg.sampling.params(), {t.task_id: task_overview(t) for t in every},
                             cfg.agent, agent_ctx)
        run_id = f"eval-{int(time.time())}"
        env = ExecutedEnvironment(LocalRunner(config_work(cfg, run_id), cfg.launch.workers), run_id,
                                  cfg.sandbox.timeout_s, cfg.launch, cfg.sandbox.max_wall_factor)
        report = evaluate_split(policy, env, [(t.task_id, t.category) for t in tasks], k, cfg.algorithm.seed,
                                step, args.pool, progress=say)
    out = Path(args.out) if args.out else default_out
    out.parent.mkdir(parents=True, exist_ok=True)
    record = {"target": str(target), "step": step, "split": args.pool, "seed": cfg.algorithm.seed,
              "at": time.time(), **report.to_dict()}
    out.write_text(json.dumps(record, sort_keys=True, indent=1, default=str), encoding="utf-8")
    print(report.table())
    print(f"wrote {out}", file=sys.stderr)
    return 0
