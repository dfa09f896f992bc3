"""Does the SFT'd tiny policy write usable solutions? Sample replies on the training tasks, parse, execute.

    python benchmarks/sft_quality.py [MODEL_DIR] [--config CFG.yaml] [--samples 8] [key=value ...]

MODEL_DIR defaults to the run config's initial policy (``model.path``, else the tiny default after
``wmrl sft``, built if missing). For every training task, ``--samples`` replies are drawn at the
config's sampling settings (temperature 1.0) from the agent's first-turn prompt; each is parsed by the
agent's parser and, when it holds code, really executed in the configured sandbox and graded. Writes
results/sft_quality.{json,md}: parse rate, valid-submission rate, position scores (mean, standard
deviation over replies, mean within-task standard deviation: the spread GRPO learns from).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from wmrl.cli.args import split_config_args
from wmrl.config import load_config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("args", nargs="*", metavar="[MODEL_DIR] [key=value ...]")
    parser.add_argument("--samples", type=int, default=8, help="replies per task")
    parser.add_argument("--config", default=None, help="run config (default: wmrl train's tiny.yaml)")
    parser.add_argument("--out", default="results/sft_quality")
    args = parser.parse_args()

    from wmrl.agent.chat import ChatTokens
    from wmrl.agent.parse import parse_reply
    from wmrl.agent.prompts import agent_messages, system_prompt
    from wmrl.configs import TINY_CONFIG as DEFAULT_CONFIG
    from wmrl.execution.outcome import execute_and_grade
    from wmrl.generation.hf import TransformersGenerator
    from wmrl.sandbox import limits_from_config, make_backend
    from wmrl.sft.data import run_context
    from wmrl.sft.pipeline import initial_policy_path
    from wmrl.tasks import load_pool, task_overview
    from wmrl.tasks.pool import ensure_pool

    model, overrides = split_config_args(args.args)
    cfg = load_config(args.config or str(DEFAULT_CONFIG), overrides)  # the prompts the run will use
    path = Path(model) if model else initial_policy_path(cfg)
    gen = TransformersGenerator.from_path(str(path), device="cpu", batch_size=cfg.generation.batch_size)
    chat = ChatTokens(gen.tokenizer)
    agent_ctx, _, _ = run_context(cfg)
    system = system_prompt(agent_ctx, cfg.agent.prompt_style)
    tasks = load_pool(ensure_pool(cfg.tasks, progress=False), split="train")
    backend, limits = make_backend(cfg.sandbox), limits_from_config(cfg.sandbox)
    rows = []
    started = time.perf_counter()
    prompts = [chat.first_prompt(agent_messages(system, task_overview(t))) for t in tasks for _ in range(args.samples)]
    gens = gen.generate(prompts, cfg.sampling.params())
    gen_seconds = time.perf_counter() - started
    with tempfile.TemporaryDirectory(prefix="wmrl-sft-quality-") as work:
        for k, reply in enumerate(gens):
            task = tasks[k // args.samples]
            parsed = parse_reply(reply.text)
            row = {"task": task.task_id, "parse": parsed.outcome, "tokens": len(reply.token_ids),
                   "finish": reply.finish_reason, "valid": False, "score": 0.0}
            if parsed.ok:
                outcome = execute_and_grade(task, parsed.code, backend, limits, Path(work))
                row.update(valid=outcome.grade.valid, score=outcome.grade.position_score,
                           status=outcome.result.status, reason=outcome.grade.reason[:200])
            rows.append(row)
            print(json.dumps(row), flush=True)
    scores = [r["score"] for r in rows]
    by_task = {t.task_id: [r["score"] for r in rows if r["task"] == t.task_id] for t in tasks}
    summary = {
        "model": str(path), "samples_per_task": args.samples, "replies": len(rows),
        "parse_rate": sum(r["parse"] == "ok" for r in rows) / len(rows),
        "valid_rate": sum(r["valid"] for r in rows) / len(rows),
        "score_mean": statistics.mean(scores), "score_sd": statistics.pstdev(scores),
        "within_task_sd_mean": statistics.mean(statistics.pstdev(v) for v in by_task.values()),
        "per_task_mean": {k: statistics.mean(v) for k, v in by_task.items()},
        "generation_seconds": gen_seconds, "sampling": vars(cfg.sampling),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"summary": summary, "replies": rows}, indent=1) + "\n")
    lines = ["# SFT'd tiny policy: sampled replies on the training tasks, executed", "",
             (f"Model `{path}`; {args.samples} replies per task at temperature {cfg.sampling.temperature}, "
             f"top-p {cfg.sampling.top_p}. Command: `python benchmarks/sft_quality.py {' '.join(args.args)}`."), "",
             f"- parse ok: {summary['parse_rate']:.1%} of {len(rows)} replies",
             f"- valid submission when executed: {summary['valid_rate']:.1%}",
             (f"- position score: mean {summary['score_mean']:.3f}, sd {summary['score_sd']:.3f}, "
             f"mean within-task sd {summary['within_task_sd_mean']:.3f}"), "",
             "| task | mean score |", "|---|---|"]
    lines += [f"| {k} | {v:.3f} |" for k, v in summary["per_task_mean"].items()]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
