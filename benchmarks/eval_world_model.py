"""The world model and the executed-solution memory against real execution, on programs that neither
the SFT data nor the memory holds, in two splits.

    python benchmarks/eval_world_model.py --model DIR [--config CFG.yaml] [key=value ...] [--limit N]

- ``heldout_tasks``: the held-out tasks' references (2 per task, spread over the leaderboard), each
  unmodified and with each broken variant of ``wmrl/world_model_data/variants.py``. No training data of any
  kind comes from these tasks.
- ``train_task_references``: references of the TRAINING tasks that the world model's SFT holds out (a
  hash of their name, ``world_model.heldout_fraction``) and that the policy's SFT does not reproduce
  (``spread_references(..., sft.references_per_task)`` picks other ones), 2 per task, with their
  broken variants. (Until issue 36 the held-out references of the training tasks were taken from the
  very references the policy's SFT reproduces, so the memory's policy samples held copies of them: the
  old table is ``results/world_model/eval-contaminated.md``.)

Every program is shown as the agent writes it (``clean_reference``: without the pool's header, whose
"(deliberately weak)" labels a reference's strength), and compared by normalised code
(``wmrl/world_model_data/contamination.py``): a variant that is in the SFT data (the policy's references, the
world model's variants) is dropped, and those with a near-copy there (which the SFT'd LLM cannot forget)
are counted; each split is scored with the run's memory less every example of the same task that is a
near-copy of one of its variants (difflib ratio >= ``--near-copy-ratio``, 0.9, over the normalised
tokens: a task's sibling references differ by a line or a number, so they go too); how many of each,
per split, is in the report, and the near-copies left in the memory (0).

Measures, with the checks, prompt style and budgets of the run config, per split:

- Pearson and Spearman of r_hat with the real score r, Spearman among the solutions that run (r > 0),
  95% CIs by Fisher's z, pass/fail accuracy, JSON-parse fallback and repair rates per answer,
  world-model calls/s and submissions/s; for the world model with the memory (the tiny default), with
  and without the pre-check, the memory alone with no LLM call (what the LLM adds), the LLM's own
  quality answer with and without the pre-check (the paper's setting);
- over all evaluated variants: the static pre-check's coverage (share of real failures it settles)
  and precision (share of its failures that are real failures: must be 1.0).

Writes results/world_model/eval.json and eval.md (``--out DIR/NAME`` writes DIR/NAME.json and .md).
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
from wmrl.sft.data import spread_references
from wmrl.tasks.pool import ensure_pool, load_pool
from wmrl.world_model.backends import InProcessBackend
from wmrl.world_model.env import TaskCase, WorldModelEnvironment
from wmrl.world_model.memory import ExecutedMemory
from wmrl.world_model.precheck import PreCheck
from wmrl.world_model_data.contamination import NEAR_COPY_RATIO, NearCopies, split_near_copies
from wmrl.world_model_data.examples import memory_examples, policy_samples, world_model_sft_variants
from wmrl.world_model_data.variants import (
    SolutionVariant,
    clean_reference,
    make_variants,
    real_outcomes,
    reference_variant,
    reference_variants,
)

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
        verdict = PreCheck(cases[v.task_id].inventory, runtime).check(clean_reference(v.code))
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
        # shown as the agent writes it: the pool's header labels some references "deliberately weak"
        feedbacks = env.evaluate([Submission(f"eval/{j}", v.task_id, clean_reference(v.code))
                                  for j, v in enumerate(chunk, i)])
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
    pc, near = report["precheck"], report["near_copies"]
    lines = [
        "# The world model against real execution, on programs neither its SFT data nor the memory holds", "",
        (f"Model: `{report['model']}`; checks: {', '.join(report['checks'])}; prompt style {report['prompt_style']}; "
         f"overview budget {report['max_overview_chars']} chars; host {report['host']}."), "",
        *([report["note"], ""] if report.get("note") else []),
        (f"Programs are compared by normalised code (the pool's header and comments stripped, whitespace "
         f"normalised); a near-copy is {near['measure']} >= {near['threshold']}. The memory: "
         f"{report['memory_examples_built']} examples built as a run builds them "
         f"({report['memory_policy_samples']} policy samples among its inputs), less, for each split, the "
         f"near-copies of its variants; near-copies of an evaluated variant left in it: "
         f"{report['memory_near_copies']}."), "",
        (f"Static pre-check over the {pc['variants']} evaluated variants of both splits ({pc['real_failures']} "
         f"really fail): coverage {pc['coverage']['rate']:.3f} ± {pc['coverage']['se']:.3f} of real failures "
         f"settled, precision {pc['precision']['rate']:.3f} ({pc['precision']['k']}/{pc['precision']['n']} "
         "flagged failures are real failures)."), "",
    ]
    for split, rows in report["splits"].items():
        c = rows["contamination"]
        lines += [
            f"## {split}: n = {rows['n']} ({rows['n_running']} run)", "",
            (f"{SPLIT_WORDS[split]} Candidates {c['candidates']}; dropped as copies of SFT data "
             f"{c['sft_copies_dropped']}; of those evaluated, {c['sft_near_copies']} have a near-copy of their "
             f"task in the SFT data (the LLM's training, which this evaluation cannot change), "
             f"{c['sft_near_copies_any_task']} one of any task (the pool's one template); memory examples removed as "
             f"near-copies of this split's variants: {c['memory_near_copies_removed']} "
             f"({c['memory_policy_samples_removed']} of them policy samples), {rows['memory_examples']} left."), "",
            ("| setting | n | Pearson r(r_hat, r) [95% CI] | Spearman | Spearman among running (r > 0) [95% CI] [n] "
             "| pass/fail accuracy | JSON fallback | repaired | WM calls/s | submissions/s |"),
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for name, m in rows["runs"].items():
            m = _no_nan(m)
            p, s, running = m["pearson"], m["spearman"], m["spearman_running"]
            lines.append(
                f"| {name} | {m['submissions']} | {_f(p['r'], 3)} [{_f(p['ci95'][0])}, {_f(p['ci95'][1])}] "
                f"| {_f(s['r'], 3)} | {_f(running['r'], 3)} [{_f(running['ci95'][0])}, {_f(running['ci95'][1])}] "
                f"[{running['n']}] | {m['pass_fail_accuracy']['rate']:.3f} ± {m['pass_fail_accuracy']['se']:.3f} "
                f"| {_f(m['parse_fallback']['rate'], 3)} | {_f(m['parse_repaired']['rate'], 3)} "
                f"| {m['calls_per_s']:.2f} | {m['submissions_per_s']:.3f} |")
        lines.append("")
    if report.get("trained_variants"):  # --trained
        m = _no_nan(report["trained_variants"])
        lines += [(f"The world model + pre-check on the {m['submissions']} variants of its own SFT (no generalisation "
                   f"measure): Pearson {_f(m['pearson']['r'], 3)}, Spearman among running "
                   f"{_f(m['spearman_running']['r'], 3)} [{m['spearman_running']['n']}]."), ""]
    lines += [f"± = standard error (binomial); 95% CIs by Fisher's z. Wall time {report['wall_s'] / 60:.1f} min. "
              "Command: `" + report["command"] + "`", ""]
    return "\n".join(lines)


SPLIT_WORDS = {
    "heldout_tasks": "The held-out tasks' references (2 per task) and their broken variants: no training data "
                     "of any kind comes from these tasks.",
    "train_task_references": "References of the training tasks held out of the world model's SFT and not among "
                             "those the policy's SFT reproduces (2 per task), and their broken variants.",
}
# (row, pre-check on, with the memory, checks the LLM is asked: the quality check alone = none with the memory)
ROWS = (("world model + memory + pre-check", True, True, None),  # the tiny default's setting: first
        ("world model + memory, no pre-check", False, True, None),
        ("memory + pre-check, no LLM call", True, True, ("quality",)),
        ("world model + pre-check (its own quality answer)", True, False, None),
        ("world model alone (paper)", False, False, None))


def train_task_reference_variants(train: list[Any], per_task: int, sft_per_task: int, heldout_fraction: float,
                                  seed: int) -> list[SolutionVariant]:
    """Per training task, ``per_task`` of its references (spread over the leaderboard) that the world
    model's SFT holds out and the policy's SFT does not reproduce, each with its broken variants."""
    out: list[SolutionVariant] = []
    for task in train:
        refs = task.reference_solutions()
        reproduced = {ref.name for ref in spread_references(refs, sft_per_task)}  # the policy's SFT references
        free = [i for i, ref in enumerate(refs)
                if ref.name not in reproduced and reference_variant(task, ref, heldout_fraction).heldout]
        for index in spread_references(free, per_task):
            out += reference_variants(task, index, heldout_fraction, seed)
    return out


def sft_programs(cfg: Any, train: list[Any], runtime: Any) -> list[tuple[str, str]]:
    """Every program of the SFT data, (task id, code): the policy's references, the world model's variants."""
    policy = [(task.task_id, clean_reference(ref.code)) for task in train
              for ref in spread_references(task.reference_solutions(), cfg.sft.references_per_task)]
    return policy + [(v.task_id, v.code) for v in world_model_sft_variants(train, cfg.world_model, runtime)]


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
    parser.add_argument("--limit", type=int, default=0, help="score at most this many variants per split")
    parser.add_argument("--batch", type=int, default=8, help="submissions per world-model batch")
    parser.add_argument("--per-task", type=int, default=2, help="references evaluated per task (default %(default)s)")
    parser.add_argument("--near-copy-ratio", type=float, default=NEAR_COPY_RATIO,
                        help="a memory example of the same task this similar to an evaluated variant is removed "
                             "(difflib ratio over normalised tokens; 1.0: exact copies only; default %(default)s)")
    parser.add_argument("--memory-only", action="store_true",
                        help="only the memory's row (no LLM call): the model is then only read for its tokenizer "
                             "and, unless world_model.memory_policy_samples=0, the memory's policy samples")
    parser.add_argument("--trained", action="store_true",
                        help="also score the world model on the variants of its own SFT (no generalisation "
                             "measure: what it learned of them)")
    parser.add_argument("--note", default="", help="a line for the report (e.g. which model this is)")
    parser.add_argument("--out", type=Path, default=OUT, help="report path without suffix (default %(default)s)")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    from dataclasses import replace

    from wmrl.configs import TINY_CONFIG as DEFAULT_CONFIG
    from wmrl.generation.hf import TransformersGenerator

    started = time.perf_counter()
    cfg = load_config(args.config or str(DEFAULT_CONFIG), args.overrides)  # the prompts the run will use
    root = ensure_pool(cfg.tasks, progress=True)  # the pool the config names (tasks.pool)
    tasks = load_pool(root)
    by_id = {t.task_id: t for t in tasks}
    train = [t for t in tasks if t.split == "train"]
    wm = cfg.world_model
    sandbox = replace(cfg.sandbox, timeout_s=min(cfg.sandbox.timeout_s, wm.variant_timeout_s))
    backend, limits = make_backend(sandbox), limits_from_config(sandbox)
    runtime = probe_runtime(make_backend(cfg.sandbox), limits_from_config(cfg.sandbox))

    candidates = {
        "heldout_tasks": make_variants([t for t in tasks if t.split != "train"], args.per_task, wm.heldout_fraction,
                                       wm.seed),
        "train_task_references": train_task_reference_variants(train, args.per_task, cfg.sft.references_per_task,
                                                               wm.heldout_fraction, wm.seed),
    }
    in_sft = sft_programs(cfg, train, runtime)
    sft, sft_any_task = NearCopies(in_sft), NearCopies(in_sft, by_task=False)
    evaluated: dict[str, list[SolutionVariant]] = {}
    contamination: dict[str, dict[str, int]] = {}
    for split, variants in candidates.items():
        fresh = [v for v in variants if not sft.copies(v.task_id, v.code)]
        contamination[split] = {"candidates": len(variants), "sft_copies_dropped": len(variants) - len(fresh)}
        if args.limit:
            fresh = fresh[:: max(1, len(fresh) // args.limit)][: args.limit]
        evaluated[split] = fresh
        contamination[split]["sft_near_copies"] = sum(sft.holds(v.task_id, v.code) for v in fresh)
        # the same template across tasks: not a copy (other data, other outcome), but said
        contamination[split]["sft_near_copies_any_task"] = sum(sft_any_task.holds(v.task_id, v.code) for v in fresh)
    every = [v for variants in evaluated.values() for v in variants]
    seen = world_model_sft_variants(train, wm, runtime)
    with tempfile.TemporaryDirectory(prefix="wmrl-eval-") as work:
        outcomes = real_outcomes(every + (seen if args.trained else []), by_id, backend, limits, runtime, Path(work),
                                 progress=True)
    cases = {t.task_id: TaskCase.from_task(t) for t in tasks}

    generator = TransformersGenerator.from_path(args.model, device="cpu")
    samples = _policy_samples(cfg, tasks, generator, runtime, args.model)
    built = memory_examples(cfg, tasks, runtime, samples, progress=True)
    sample_codes = {(s.task_id, clean_reference(s.code)) for s in samples}
    report: dict[str, Any] = {
        "model": args.model, "checks": list(wm.checks), "prompt_style": wm.prompt_style,
        "max_overview_chars": wm.max_overview_chars, "host": f"{platform.node()} ({platform.processor()})",
        "command": " ".join(["python", *sys.argv]), "note": args.note,
        "near_copies": {"measure": "difflib SequenceMatcher ratio over the normalised code's tokens, same task",
                        "threshold": args.near_copy_ratio},
        "memory_examples_built": len(built), "memory_policy_samples": len(samples), "memory_near_copies": 0,
        "precheck": precheck_quality(every, outcomes, cases, runtime), "splits": {},
    }
    rows = [row for row in ROWS if not args.memory_only or row[3] == ("quality",)]
    for split, variants in evaluated.items():
        # each split's memory: the run's, less the near-copies of this split's variants
        near = NearCopies(((v.task_id, v.code) for v in variants), args.near_copy_ratio)
        kept, removed = split_near_copies(built, near)
        contamination[split]["memory_near_copies_removed"] = len(removed)
        contamination[split]["memory_policy_samples_removed"] = sum((e.task_id, e.code) in sample_codes
                                                                    for e in removed)
        memory = ExecutedMemory(kept)
        left = sum(near.holds(e.task_id, e.code) for e in memory.examples)  # the check: none
        report["memory_near_copies"] += left
        runs = {}
        for name, precheck, remember, checks in rows:
            env_cfg = replace(wm, precheck=precheck, checks=list(checks or wm.checks))
            env = WorldModelEnvironment(InProcessBackend(generator, wm.max_new_tokens, wm.temperature, wm.seed),
                                        cases, env_cfg, runtime, cfg.sandbox.timeout_s, cfg.sandbox.gpus,
                                        memory if remember else None)
            runs[name] = run_world_model(env, variants, outcomes, args.batch)
            print(split, name, json.dumps({k: v for k, v in runs[name].items() if k != "problems"})[:600], flush=True)
        head_name = rows[0][0]
        head = runs[head_name]
        report["splits"][split] = {
            "n": len(variants), "setting": head_name, "pearson": head["pearson"]["r"],
            "spearman_running": head["spearman_running"]["r"], "n_running": head["spearman_running"]["n"],
            "ci95": {"pearson": head["pearson"]["ci95"], "spearman_running": head["spearman_running"]["ci95"],
                     "method": "Fisher z"},
            "memory_examples": len(memory), "memory_near_copies": left,
            "contamination": contamination[split], "runs": runs}
    if args.trained:  # no generalisation measure: what the world model learned of its own SFT variants
        env = WorldModelEnvironment(InProcessBackend(generator, wm.max_new_tokens, wm.temperature, wm.seed),
                                    cases, wm, runtime, cfg.sandbox.timeout_s, cfg.sandbox.gpus, None)
        report["trained_variants"] = run_world_model(env, seen, outcomes, args.batch)
    report["wall_s"] = time.perf_counter() - started
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(args.out.with_name(args.out.name + ".json"), _no_nan(report))
    atomic_write_text(args.out.with_name(args.out.name + ".md"), table(report))
    print(table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
