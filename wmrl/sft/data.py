"""SFT examples for the tiny default: the agent's reply format and the world model's JSON.

- **policy** (kind ``"agent"``): the first turn's rendered prompt ids (system prompt + task overview, as
  :class:`~wmrl.agent.policy.AgentPolicy` renders them) -> a reply of 2-4 sentences of analysis, then
  ONE fenced Python block holding a reference solution of a built-in TRAINING task, then the end of
  turn. References spread over each task's leaderboard, weak ones included (``sft.references_per_task``;
  default every one), so that sampling spreads over solutions of different strength (the spread GRPO
  learns from).
- **world model** (kind ``"world_model"``): each configured check's rendered prompt ids (as
  :class:`~wmrl.world_model.env.WorldModelEnvironment` renders them) -> the strict JSON that check
  should answer, derived from the REALLY executed outcome of a reference or a broken variant
  (:mod:`wmrl.world_model.variants`, :mod:`wmrl.world_model.targets`). Held-out variants are never used.

The prompts are rendered with the same code and config as at run time (prompt styles, checks, overview
budget, probed sandbox runtime), so the model is trained on exactly what it will be shown. An example
longer than ``max_tokens`` is skipped and counted (``SFTData.skipped``), never silently truncated.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from wmrl.agent.chat import ChatTokens
from wmrl.agent.prompts import PromptContext, agent_messages, system_prompt
from wmrl.sft.config import SFTRunConfig
from wmrl.sft.example import SFTExample
from wmrl.world_model.memory import Executed
from wmrl.world_model.prompts import (
    QUALITY,
    WorldModelContext,
    check_messages,
    get_checks,
    simulator_system_prompt,
)
from wmrl.world_model.targets import target_json
from wmrl.world_model.variants import (
    AGENT_MISTAKES,
    POLICY_SAMPLE,
    REFERENCE,
    Outcome,
    SolutionVariant,
    all_references,
    clean_reference,
    make_variants,
)

AGENT, WORLD_MODEL = "agent", "world_model"
_MODEL = re.compile(r"^model = (.+)$", re.MULTILINE)
FEATURE_WORDS = {"all": "all features", "half": "half of the features", "two": "two features",
                 "one": "a single feature", "pool": "2x2-pooled pixels", "pool4": "4x4-pooled pixels",
                 "rows": "row-mean profiles", "small": "a small vocabulary", "last": "the last feature"}


@dataclass
class SFTData:
    examples: list[Any]
    counts: Counter = field(default_factory=Counter)  # examples per kind
    skipped: Counter = field(default_factory=Counter)  # too long, per kind


def analysis_for(task: Any, code: str, note: str = "") -> str:
    """2-4 sentences: the target and metric, the one model and the features, the plan to submit."""
    model = _MODEL.search(code)
    estimator = model.group(1).strip() if model else "a simple model"
    if len(estimator) > 90:
        estimator = estimator[:87] + "..."
    fields = dict(part.split("=", 1) for part in note.split() if "=" in part and not part.startswith("params"))
    features = FEATURE_WORDS.get(fields.get("features", "all"), "the features")
    fraction = fields.get("fraction", "1.0")
    subset = "" if fraction in ("1.0", "1") else f", using {float(fraction):.0%} of the training rows"
    better = "higher is better" if task.direction == "max" else "lower is better"
    targets = ", ".join(f"`{c}`" for c in task.target_columns)
    return (f"The target is {targets} and the metric is {task.metric_name} ({better}). "
            f"I will fit `{estimator}` on {features}{subset}. "
            "The script reads DATA_DIR, predicts one row per test id and writes SUBMISSION_PATH in the sample format.")


def reply_text(analysis: str, code: str) -> str:
    return f"{analysis}\n\n```python\n{code.rstrip()}\n```"


def _ids(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


def spread_references(refs: Sequence[Any], k: int) -> list[Any]:
    """``k`` of ``refs`` (sorted weakest first) at evenly spaced ranks, both ends included; all if k is 0."""
    if k <= 0 or k >= len(refs):
        return list(refs)
    if k == 1:
        return [refs[-1]]
    return [refs[round(i * (len(refs) - 1) / (k - 1))] for i in range(k)]


def policy_examples(tokenizer: Any, tasks: Sequence[Any], overviews: Mapping[str, str], context: PromptContext,
                    prompt_style: str, max_tokens: int, data: SFTData, references_per_task: int = 0) -> None:
    chat = ChatTokens(tokenizer)
    system = system_prompt(context, prompt_style)
    end = [tokenizer.eos_token_id]
    for task in tasks:
        prompt = chat.first_prompt(agent_messages(system, overviews[task.task_id]))
        for ref in spread_references(task.reference_solutions(), references_per_task):
            code = clean_reference(ref.code)
            target = _ids(tokenizer, reply_text(analysis_for(task, code, ref.note), code)) + end
            _add(data, SFTExample(prompt, target, AGENT), max_tokens)


def world_model_examples(tokenizer: Any, variants: Sequence[SolutionVariant], outcomes: Mapping[str, Outcome],
                         overviews: Mapping[str, str], context: WorldModelContext, checks: Sequence[str],
                         prompt_style: str, max_overview_chars: int, max_tokens: int, data: SFTData) -> None:
    chat = ChatTokens(tokenizer)
    system = simulator_system_prompt(context, prompt_style)
    end = [tokenizer.eos_token_id]
    for variant in variants:
        if variant.heldout or variant.key not in outcomes:
            continue
        for check in get_checks([QUALITY] if variant.quality_only else list(checks)):
            messages = check_messages(system, check, overviews[variant.task_id], variant.code, max_overview_chars)
            answer = target_json(check.name, outcomes[variant.key], variant.reference_score, list(checks))
            _add(data, SFTExample(chat.first_prompt(messages), _ids(tokenizer, answer) + end, WORLD_MODEL),
                 max_tokens)


def left_to_the_world_model(variants: Sequence[SolutionVariant], tasks: Sequence[Any], runtime: Any) -> list[SolutionVariant]:
    """The variants the static pre-check does not settle. A run with the pre-check on never asks the
    world model about the others, and training on them (most of the broken variants) taught a tiny
    model to answer "No module named ..." whatever the code."""
    from wmrl.world_model.precheck import DataInventory, PreCheck

    prechecks = {t.task_id: PreCheck(DataInventory.from_dir(Path(t.public_dir)), runtime) for t in tasks}
    return [v for v in variants if prechecks[v.task_id].check(v.code) is None]


def world_model_sft_variants(train: Sequence[Any], wm: Any, runtime: Any) -> list[SolutionVariant]:
    """The variants ``wmrl sft`` executes and trains the world model on: the training tasks' variants
    that are not held out (those are the world model evaluation's, benchmarks/eval_world_model.py),
    less the ones the pre-check settles when it is on."""
    variants = [v for v in make_variants(list(train), wm.sft_variants_per_task, wm.heldout_fraction, wm.seed)
                if not v.heldout]
    if wm.sft_all_references:  # the leaderboard's really-run references, scored: nothing to execute
        # Their quality check only: three passing answers more for each would teach "every check passes"
        # (results/world_model/eval-all-references-quality-only.md).
        seen = {v.key for v in variants}
        for reference in all_references(list(train), wm.heldout_fraction):
            if not reference.heldout and reference.key not in seen:
                variants.append(replace(reference, quality_only=True))
                seen.add(reference.key)
    return left_to_the_world_model(variants, train, runtime) if wm.precheck else variants


def _add(data: SFTData, example: Any, max_tokens: int) -> None:
    if len(example.prompt_ids) + len(example.target_ids) > max_tokens:
        data.skipped[example.kind] += 1
        return
    data.examples.append(example)
    data.counts[example.kind] += 1


def run_context(cfg: SFTRunConfig, tokenizer_max: int | None = None) -> tuple[PromptContext, WorldModelContext, Any]:
    """The probed sandbox runtime and the prompt contexts a run with ``cfg`` uses."""
    from wmrl.sandbox import limits_from_config, make_backend
    from wmrl.sandbox.probe import probe_runtime

    runtime = probe_runtime(make_backend(cfg.sandbox), limits_from_config(cfg.sandbox))
    agent = PromptContext(cfg.agent.max_turns, cfg.sandbox.timeout_s, cfg.sandbox.gpus, runtime)
    simulator = WorldModelContext(cfg.sandbox.timeout_s, cfg.sandbox.gpus, runtime)
    return agent, simulator, runtime


def build_sft_data(cfg: SFTRunConfig, tokenizer: Any, max_tokens: int, progress: bool = True) -> SFTData:
    """Every SFT example for the run config ``cfg`` (a :class:`~wmrl.config.WMRLConfig`): the policy's
    on the training tasks, the world model's on the non-held-out variants (executed once, cached)."""
    from wmrl.tasks.overview import task_overview
    from wmrl.tasks.pool import ensure_builtin_pool, load_pool

    root = ensure_builtin_pool(cfg.tasks.root or None, progress=progress)
    tasks = load_pool(root)
    overviews = {t.task_id: task_overview(t) for t in tasks}
    agent_ctx, sim_ctx, runtime = run_context(cfg)
    data = SFTData([])
    train = [t for t in tasks if t.split == "train"]
    policy_examples(tokenizer, train, overviews, agent_ctx, cfg.agent.prompt_style, max_tokens, data,
                    cfg.sft.references_per_task)
    wm = cfg.world_model
    variants = world_model_sft_variants(train, wm, runtime)
    outcomes = executed_outcomes(cfg, tasks, variants, runtime, progress)
    world_model_examples(tokenizer, variants, outcomes, overviews, sim_ctx, wm.checks, wm.prompt_style,
                         wm.max_overview_chars, max_tokens, data)
    return data


def executed_outcomes(cfg: SFTRunConfig, tasks: Sequence[Any], variants: Sequence[SolutionVariant], runtime: Any,
                      progress: bool = True) -> dict[str, Outcome]:
    """The variants' real outcomes (``real_outcomes``: executed in the run's sandbox with the world model's
    variant time budget, once; cached by content)."""
    import tempfile

    from wmrl.sandbox import limits_from_config, make_backend
    from wmrl.world_model.variants import real_outcomes

    sandbox = replace(cfg.sandbox, timeout_s=min(cfg.sandbox.timeout_s, cfg.world_model.variant_timeout_s))
    with tempfile.TemporaryDirectory(prefix="wmrl-variants-") as work:
        return real_outcomes(list(variants), {t.task_id: t for t in tasks}, make_backend(sandbox),
                             limits_from_config(sandbox), runtime, Path(work), progress=progress)


def memory_examples(cfg: SFTRunConfig, tasks: Sequence[Any], runtime: Any, samples: Sequence[SolutionVariant] = (),
                    progress: bool = True, cost: dict[str, float] | None = None) -> list[Executed]:
    """What the executed-solution memory starts from (``world_model.memory``): every reference of the
    training tasks that is not held out, with its leaderboard score; the broken variants the world
    model's SFT executes (cached: nothing new runs after ``wmrl sft``), and those references with the
    agent's own mistakes (``AGENT_MISTAKES``); and ``samples`` (:func:`policy_samples`). Each is
    executed once, cached by content; the ones the pre-check settles are left out when it is on (a run
    never asks the world model about them).

    ``cost``, when given, receives what the memory's own executions cost (those beyond the SFT's, whose
    cost is the SFT's): ``executions`` and ``seconds_execution``, the sum of each outcome's recorded
    seconds, the same whether they ran now or were read from the cache."""
    train = [t for t in tasks if t.split == "train"]
    wm = cfg.world_model
    variants = world_model_sft_variants(train, replace(wm, sft_all_references=True), runtime)
    sft_keys = {v.key for v in world_model_sft_variants(train, wm, runtime)}
    agent_mistakes = [v for v in make_variants(train, wm.sft_variants_per_task, wm.heldout_fraction, wm.seed,
                                               kinds=AGENT_MISTAKES) if not v.heldout and v.kind != REFERENCE]
    extra = agent_mistakes + [s for s in samples if s.task_id in {t.task_id for t in train}]
    variants += left_to_the_world_model(extra, train, runtime) if wm.precheck else extra
    unique: dict[str, SolutionVariant] = {}
    # Compared and kept without the pool's header (clean_reference): it labels some references "deliberately
    # weak", which no code the agent writes says. A sample that repeats a reference verbatim is that
    # reference: the reference (its leaderboard run) stays.
    for v in variants:
        unique.setdefault(replace(v, code=clean_reference(v.code)).key, v)
    variants = list(unique.values())
    outcomes = executed_outcomes(cfg, tasks, variants, runtime, progress)
    if cost is not None:
        own = [outcomes[v.key] for v in variants if v.key not in sft_keys and outcomes[v.key].source == "executed"]
        cost.update(executions=len(own), seconds_execution=float(sum(o.seconds for o in own)))
    return [Executed(v.task_id, clean_reference(v.code), outcomes[v.key].score, outcomes[v.key].valid)
            for v in variants]


def _samples_file(policy: Any, tasks: Sequence[Any], per_task: int, seed: int, build: str | None) -> Path:
    """Where :func:`policy_samples` caches the samples of ``build`` (their ``.cost.json`` beside them)."""
    from wmrl.world_model.variants import cache_dir

    params = policy.params
    key = hashlib.sha256(json.dumps([build, [t.task_id for t in tasks], per_task, seed, params.temperature,
                                     params.top_p, params.max_new_tokens]).encode()).hexdigest()[:16]
    return cache_dir().parent / "policy_samples" / f"{key}.json"


def policy_samples_cost(policy: Any, tasks: Sequence[Any], per_task: int, seed: int,
                        build: str | None) -> dict[str, float] | None:
    """What drawing :func:`policy_samples`' samples of ``build`` cost when they were drawn (``samples``,
    ``seconds_generation``); None when they were drawn before the cost was recorded, or not cached."""
    from wmrl.io import read_json

    record = _samples_file(policy, tasks, per_task, seed, build).with_suffix(".cost.json")
    return read_json(record) if build is not None and record.is_file() else None


def policy_samples(policy: Any, tasks: Sequence[Any], per_task: int, seed: int,
                   build: str | None = None) -> list[SolutionVariant]:
    """``per_task`` first-turn solutions ``policy`` (an :class:`~wmrl.agent.policy.AgentPolicy`) writes
    for each of ``tasks`` with its sampling params, seeded by ``seed``: the distribution the world model
    meets when a run starts. With ``build`` (the policy's build hash: the tiny default's SFT) the samples
    are cached under it, so every run and seed from that policy samples once."""
    from wmrl.agent.parse import parse_reply
    from wmrl.io import atomic_write_json, read_json

    if per_task == 0:
        return []
    ids = [t.task_id for t in tasks]
    params = policy.params
    cached = _samples_file(policy, tasks, per_task, seed, build)
    if build is not None and cached.is_file():
        codes = read_json(cached)
    else:
        started = time.perf_counter()
        drawn_for = [task_id for task_id in ids for _ in range(per_task)]
        prompts = [policy.first_prompt(task_id) for task_id in drawn_for]
        seeds = [int(s) for s in np.random.default_rng([seed, per_task]).integers(0, 2**31 - 1, len(prompts))]
        generations = policy.generator.generate(prompts, params, seeds=seeds)
        codes = [[task_id, parse_reply(g.text).code] for task_id, g in zip(drawn_for, generations, strict=True)]
        if build is not None:
            # what drawing them cost, beside them: a one-time cost of the memory that every later run
            # from this build reads back (policy_samples_cost) instead of paying it
            atomic_write_json(cached.with_suffix(".cost.json"),
                              {"samples": len(codes), "seconds_generation": time.perf_counter() - started})
            atomic_write_json(cached, codes)
    return [SolutionVariant(task_id, POLICY_SAMPLE, POLICY_SAMPLE, code, False, 0.0)
            for task_id, code in codes if code]
