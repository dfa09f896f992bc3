"""The world model against real execution on held-out reference variants (never used by `wmrl sft`),
and, apart, on the variants it was trained on.

    python benchmarks/eval_world_model.py --model DIR [--config CFG.yaml] [key=value ...] [--limit N]

Variants: every built-in task's references spread over its leaderboard (4 per training task, 2 per
held-out task), each unmodified and with each broken variant of ``wmrl/world_model/variants.py``; their
real outcomes come from the cache that ``wmrl sft`` fills (executed in bwrap; references from their
leaderboard run). Held out = every reference of a held-out task, and 25% of the training tasks'
references (by a hash of their name); only those are scored here.

Measures, with the checks, prompt style and budgets of the run config:

- pre-check coverage (share of real failures it settles) and precision (share of its failures that
  are real failures: must be 1.0), over ALL variants (training ones included: it learns nothing);
- the LLM world model with the pre-check on (the default) and off (the paper's exact setting):
  Pearson and Spearman correlation of r_hat with r, pass/fail accuracy of the predicted validity,
  JSON-parse fallback and repair rates per answer, world-model calls/s and submissions/s;
- with ``--memory``: the same with the executed-solution memory answering the quality check
  (``world_model.memory``), and the memory alone with no LLM call.

Writes results/world_model/eval.json and eval.md (``--out DIR/NAME`` writes DIR/NAME.json and .md: e.g. a
second SFT beside the committed default's).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from wmrl.config import load_config
from wmrl.io import atomic_write_json, atomic_write_text
from wmrl.rollout import Submission
from wmrl.sandbox import limits_from_config, make_backend
from wmrl.sandbox.probe import probe_runtime
from wmrl.sft.data import memory_examples, policy_samples
from wmrl.tasks.pool import ensure_builtin_pool, load_pool
from wmrl.world_model.backends import InProcessBackend
from wmrl.world_model.env import TaskCase, WorldModelEnvironment
from wmrl.world_model.memory import ExecutedMemory
from wmrl.world_model.precheck import PreCheck
from wmrl.world_model.variants import make_variants, real_outcomes

OUT = Path(__file__).resolve().parents[1] / "results" / "world_model" / "eval"


def proportion(k: int, n: int) -> dict[str, float]:
    p = k / n if n else float("nan")
    return {"k": k, "n": n, "rate": p, "se": float(np.sqrt(p * (1 - p) / n)) if n else float("nan")}


def correlation(x: list[float], y: list[float], kind: str) -> dict[str, float]:
    if len(x) < 3 or np.std(x) == 0 or np.std(y) == 0:
        return {"r": float("nan"), "ci95": [float("nan"), float("nan")], "n": len(x)}
    r = float((stats.pearsonr if kind == "pearson" else stats.spearmanr)(x, y)[0])
    z, se = np.arctanh(np.clip(r, -0.999999, 0.999999)), 1 / np.sqrt(max(len(x) - 3, 1))  # Fisher z
    return {"r": r, "ci95": [float(np.tanh(z - 1.96 * se)), float(np.tanh(z + 1.96 * se))], "n": len(x)}


def precheck_quality(variants, outcomes, cases, runtime) -> dict:
    flagged = real_fail = flagged_and_failed = 0
    wrong = []
    for v in variants:
        verdict = PreCheck(cases[v.task_id].inventory, runtime).check(v.code)
        failed = not outcomes[v.key].valid
        real_fail += failed
        if verdict is not None:
            flagged += 1
            flagged_and_failed += failed
            if not failed:
                wrong.append(f"{v.task_id}/{v.reference}/{v.kind}: {verdict.check} {verdict.reason}")
    return {"variants": len(variants), "real_failures": real_fail, "flagged": flagged,
            "coverage": proportion(flagged_and_failed, real_fail), "precision": proportion(flagged_and_failed, flagged),
            "false_failures": wrong}


def run_world_model(env: WorldModelEnvironment, variants, outcomes, batch: int) -> dict:
    r, r_hat, agree = [], [], 0
    start = time.perf_counter()
    for i in range(0, len(variants), batch):
        chunk = variants[i: i + batch]
        feedbacks = env.evaluate([Submission(f"eval/{j}", v.task_id, v.code) for j, v in enumerate(chunk, i)])
        for v, fb in zip(chunk, feedbacks, strict=True):
            r.append(outcomes[v.key].score)
            r_hat.append(float(fb.score if fb.score is not None else np.nan))
            agree += fb.valid == outcomes[v.key].valid
    seconds = time.perf_counter() - start
    counts = env.stats()
    answers = sum(v for k, v in counts.items() if k.startswith("verdict:"))
    return {
        "submissions": len(variants), "seconds": seconds,
        "calls": int(counts.get("calls", 0)), "calls_per_s": counts.get("calls", 0) / seconds,
        "submissions_per_s": len(variants) / seconds,
        "pearson": correlation(r_hat, r, "pearson"), "spearman": correlation(r_hat, r, "spearman"),
        # the ranking that matters once the pre-check has settled the failures: among solutions that run
        "spearman_running": correlation([h for h, x in zip(r_hat, r) if x > 0], [x for x in r if x > 0], "spearman"),
        "pass_fail_accuracy": proportion(agree, len(variants)),
        "parse_fallback": proportion(int(counts.get("verdict:fallback", 0)), int(answers)),
        "parse_repaired": proportion(int(counts.get("verdict:repaired", 0)), int(answers)),
        "precheck_settled": int(counts.get("precheck_settled", 0)),
        "problems": {k[8:]: int(v) for k, v in counts.items() if k.startswith("problem:")},
        "mean_r": float(np.mean(r)), "mean_r_hat": float(np.nanmean(r_hat)),
    }


def _no_nan(obj):
    """JSON has no NaN: an undefined statistic (e.g. a correlation with a constant r_hat) becomes null."""
    if isinstance(obj, float) and math.isnan(obj):
        return None
    if isinstance(obj, dict):
        return {k: _no_nan(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_no_nan(v) for v in obj]
    return obj


def _f(x: float | None, digits: int = 2) -> str:
    return "undefined" if x is None else f"{x:.{digits}f}"


def table(report: dict) -> str:
    pc = report["precheck"]
    lines = [
        "# The world model against real execution (held-out reference variants; then its own SFT variants)", "",
        (f"Model: `{report['model']}`; checks: {', '.join(report['checks'])}; prompt style {report['prompt_style']}; "
        f"overview budget {report['max_overview_chars']} chars; host {report['host']}."), "",
        *([report["note"], ""] if report.get("note") else []),
        (f"Static pre-check over all {pc['variants']} variants ({pc['real_failures']} really fail): "
        f"coverage {pc['coverage']['rate']:.3f} ± {pc['coverage']['se']:.3f} of real failures settled, "
        f"precision {pc['precision']['rate']:.3f} ({pc['precision']['k']}/{pc['precision']['n']} flagged "
        "failures are real failures)."), "",
        ("| setting | n | Pearson r(r_hat, r) [95% CI] | Spearman | Spearman among running (r > 0) [n] "
        "| pass/fail accuracy | JSON fallback | repaired | WM calls/s | submissions/s |"),
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, m in report["runs"].items():
        m = _no_nan(m)
        p, s, running = m["pearson"], m["spearman"], m.get("spearman_running", {"r": None, "n": 0})
        lines.append(
            f"| {name} | {m['submissions']} | {_f(p['r'], 3)} [{_f(p['ci95'][0])}, {_f(p['ci95'][1])}] | {_f(s['r'], 3)} "
            f"| {_f(running['r'], 3)} [{running['n']}] "
            f"| {m['pass_fail_accuracy']['rate']:.3f} ± {m['pass_fail_accuracy']['se']:.3f} "
            f"| {_f(m['parse_fallback']['rate'], 3)} | {_f(m['parse_repaired']['rate'], 3)} "
            f"| {m['calls_per_s']:.2f} | {m['submissions_per_s']:.3f} |")
    lines += ["", "± = standard error (binomial); CI by Fisher's z. Command: `" + report["command"] + "`", ""]
    return "\n".join(lines)


def _policy_samples(cfg: Any, tasks: list[Any], generator: Any, runtime: Any, model: str) -> list[Any]:
    """The memory's samples of the initial policy, as a run draws them: ``model`` is the tiny default's
    SFT, policy and world model at once."""
    from wmrl.agent.policy import AgentPolicy
    from wmrl.agent.prompts import PromptContext
    from wmrl.models.cache import built_hash
    from wmrl.tasks.overview import task_overview

    context = PromptContext(cfg.agent.max_turns, cfg.sandbox.timeout_s, cfg.sandbox.gpus, runtime)
    policy = AgentPolicy(generator, cfg.sampling.params(), {t.task_id: task_overview(t) for t in tasks}, cfg.agent,
                         context)
    train = [t for t in tasks if t.split == "train"]
    return policy_samples(policy, train, cfg.world_model.memory_policy_samples, cfg.world_model.seed, built_hash(Path(model)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="HF directory of the world model (e.g. the SFT output)")
    parser.add_argument("--config", default=None, help="run config (default: wmrl train's tiny.yaml)")
    parser.add_argument("--limit", type=int, default=0, help="score at most this many held-out variants")
    parser.add_argument("--batch", type=int, default=8, help="submissions per world-model batch")
    parser.add_argument("--memory", action="store_true",
                        help="also score the world model with the executed-solution memory answering the quality "
                             "check (world_model.memory), and the memory alone")
    parser.add_argument("--note", default="", help="a line for the report (e.g. which model this is)")
    parser.add_argument("--out", type=Path, default=OUT, help="report path without suffix (default %(default)s)")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    from wmrl.configs import TINY_CONFIG as DEFAULT_CONFIG

    cfg = load_config(args.config or str(DEFAULT_CONFIG), args.overrides)  # the prompts the run will use
    from wmrl.generation.hf import TransformersGenerator

    root = ensure_builtin_pool(cfg.tasks.root or None, progress=True)
    tasks = load_pool(root)
    by_id = {t.task_id: t for t in tasks}
    wm = cfg.world_model
    variants = (make_variants([t for t in tasks if t.split == "train"], wm.sft_variants_per_task, wm.heldout_fraction,
                              wm.seed)
                + make_variants([t for t in tasks if t.split != "train"], 2, wm.heldout_fraction, wm.seed))
    from dataclasses import replace

    sandbox = replace(cfg.sandbox, timeout_s=min(cfg.sandbox.timeout_s, wm.variant_timeout_s))
    backend, limits = make_backend(sandbox), limits_from_config(sandbox)
    runtime = probe_runtime(make_backend(cfg.sandbox), limits_from_config(cfg.sandbox))
    with tempfile.TemporaryDirectory(prefix="wmrl-eval-") as work:
        outcomes = real_outcomes(variants, by_id, backend, limits, runtime, Path(work), progress=True)
    cases = {t.task_id: TaskCase.from_task(t) for t in tasks}
    report = {"model": args.model, "checks": list(wm.checks), "prompt_style": wm.prompt_style,
              "max_overview_chars": wm.max_overview_chars, "host": f"{platform.node()} ({platform.processor()})",
              "command": " ".join(["python", *sys.argv]), "note": args.note,
              "precheck": precheck_quality(variants, outcomes, cases, runtime), "runs": {}}
    held = [v for v in variants if v.heldout]
    seen = [v for v in variants if not v.heldout]
    if args.limit:
        held = held[:: max(1, len(held) // args.limit)][: args.limit]
        seen = seen[:: max(1, len(seen) // args.limit)][: args.limit]
    generator = TransformersGenerator.from_path(args.model, device="cpu")
    memory = None
    # (row, pre-check on, variants, with the memory, the checks the LLM is asked)
    settings = [("world model + pre-check", True, held, False, wm.checks),
                ("world model alone (paper)", False, held, False, wm.checks)]
    if args.memory:  # fitted on the training tasks' references, variants and policy samples: held-out ones never
        held_keys = {v.key for v in held}
        samples = [s for s in _policy_samples(cfg, tasks, generator, runtime, args.model) if s.key not in held_keys]
        memory = ExecutedMemory(memory_examples(cfg, tasks, runtime, samples, progress=True))
        report["memory_examples"] = len(memory)
        report["memory_policy_samples"] = len(samples)
        settings += [("world model + memory + pre-check", True, held, True, wm.checks),
                     ("memory + pre-check, no LLM call", True, held, True, ["quality"])]
    # The last row is no generalisation measure: it shows what the world model learned of the variants it
    # was trained on, which is what it is asked about in a tiny run (the policy writes the references it
    # memorised, on the training tasks).
    settings.append(("SFT's own variants, world model + pre-check", True, seen, False, wm.checks))
    for name, precheck, chosen, remember, checks in settings:
        env_cfg = replace(wm, precheck=precheck, checks=checks)
        env = WorldModelEnvironment(InProcessBackend(generator, wm.max_new_tokens, wm.temperature, wm.seed),
                                    cases, env_cfg, runtime, cfg.sandbox.timeout_s, cfg.sandbox.gpus,
                                    memory if remember else None)
        report["runs"][name] = run_world_model(env, chosen, outcomes, args.batch)
        print(name, json.dumps({k: v for k, v in report["runs"][name].items() if k != "problems"})[:600], flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(args.out.with_name(args.out.name + ".json"), _no_nan(report))
    atomic_write_text(args.out.with_name(args.out.name + ".md"), table(report))
    print(table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
