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
  (:mod:`wmrl.world_model_data.examples`, :mod:`wmrl.world_model_data.targets`). Held-out variants are
  never used.

The prompts are rendered with the same code and config as at run time (prompt styles, checks, overview
budget, probed sandbox runtime), so the model is trained on exactly what it will be shown. An example
longer than ``max_tokens`` is skipped and counted (``SFTData.skipped``), never silently truncated.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from wmrl.agent.chat import ChatTokens
from wmrl.agent.prompts import PromptContext, agent_messages, system_prompt
from wmrl.sandbox import limits_from_config, make_backend
from wmrl.sandbox.probe import probe_runtime
from wmrl.sft.config import SFTRunConfig
from wmrl.sft.example import SFTExample
from wmrl.tasks.overview import task_overview
from wmrl.tasks.pool import ensure_pool, load_pool
from wmrl.world_model.prompts import (
    QUALITY,
    WorldModelContext,
    check_messages,
    get_checks,
    simulator_system_prompt,
)
from wmrl.world_model_data.examples import executed_outcomes, world_model_sft_variants
from wmrl.world_model_data.targets import target_json
from wmrl.world_model_data.variants import Outcome, SolutionVariant, clean_reference

AGENT, WORLD_MODEL = "agent", "world_model"
_MODEL = re.compile(r"^model = (.+)$", re.MULTILINE)
_READ_CSV = re.compile(r'read_csv\(os\.path\.join\(DATA_DIR, "([^"]+)"\)')
FEATURE_WORDS = {"all": "all features", "half": "half of the features", "two": "two features",
                 "one": "a single feature", "pool": "2x2-pooled pixels", "pool4": "4x4-pooled pixels",
                 "rows": "row-mean profiles", "small": "a small vocabulary", "last": "the last feature"}


@dataclass
class SFTData:
    examples: list[Any]
    counts: Counter = field(default_factory=Counter)  # examples per kind
    skipped: Counter = field(default_factory=Counter)  # too long, per kind


def analysis_for(task: Any, code: str, note: str = "", name_inputs: bool = False) -> str:
    """2-4 sentences: the target and metric, the one model and the features, the plan to submit.

    ``name_inputs`` (``sft.reply_names_inputs``): a first sentence names the CSV files the code reads and
    the id column, then the target: the reply states every name the code must take from the prompt, in
    the order the code uses them, before the code."""
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
    what = f"The target is {targets} and the metric is {task.metric_name} ({better}). "
    fit = f"I will fit `{estimator}` on {features}{subset}. "
    if not name_inputs:
        return what + fit + ("The script reads DATA_DIR, predicts one row per test id and writes SUBMISSION_PATH "
                             "in the sample format.")
    files = list(dict.fromkeys(_READ_CSV.findall(code)))
    reads = f"reads {' and '.join(f'`{f}`' for f in files)} from DATA_DIR" if files else "reads DATA_DIR"
    return (f"The script {reads} and predicts one row per `{task.id_column}`. " + what + fit
            + "It writes SUBMISSION_PATH in the sample format.")


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
                    prompt_style: str, max_tokens: int, data: SFTData, references_per_task: int = 0,
                    name_inputs: bool = False) -> None:
    chat = ChatTokens(tokenizer)
    system = system_prompt(context, prompt_style)
    end = [tokenizer.eos_token_id]
    for task in tasks:
        prompt = chat.first_prompt(agent_messages(system, overviews[task.task_id]))
        for ref in spread_references(task.reference_solutions(), references_per_task):
            code = clean_reference(ref.code)
            target = _ids(tokenizer, reply_text(analysis_for(task, code, ref.note, name_inputs), code)) + end
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


def _add(data: SFTData, example: Any, max_tokens: int) -> None:
    if len(example.prompt_ids) + len(example.target_ids) > max_tokens:
        data.skipped[example.kind] += 1
        return
    data.examples.append(example)
    data.counts[example.kind] += 1


def run_context(cfg: SFTRunConfig, tokenizer_max: int | None = None) -> tuple[PromptContext, WorldModelContext, Any]:
    """The probed sandbox runtime and the prompt contexts a run with ``cfg`` uses."""
    runtime = probe_runtime(make_backend(cfg.sandbox), limits_from_config(cfg.sandbox))
    agent = PromptContext(cfg.agent.max_turns, cfg.sandbox.timeout_s, cfg.sandbox.gpus, runtime)
    simulator = WorldModelContext(cfg.sandbox.timeout_s, cfg.sandbox.gpus, runtime)
    return agent, simulator, runtime


def build_sft_data(cfg: SFTRunConfig, tokenizer: Any, max_tokens: int, progress: bool = True) -> SFTData:
    """Every SFT example for the run config ``cfg`` (a :class:`~wmrl.config.WMRLConfig`): the policy's
    on the training tasks, the world model's on the non-held-out variants (executed once, cached)."""
    root = ensure_pool(cfg.tasks, progress=progress)
    tasks = load_pool(root)
    overviews = {t.task_id: task_overview(t) for t in tasks}
    agent_ctx, sim_ctx, runtime = run_context(cfg)
    data = SFTData([])
    train = [t for t in tasks if t.split == "train"]
    policy_examples(tokenizer, train, overviews, agent_ctx, cfg.agent.prompt_style, max_tokens, data,
                    cfg.sft.references_per_task, cfg.sft.reply_names_inputs)
    wm = cfg.world_model
    variants = world_model_sft_variants(train, wm, runtime)
    outcomes = executed_outcomes(cfg, tasks, variants, runtime, progress)
    world_model_examples(tokenizer, variants, outcomes, overviews, sim_ctx, wm.checks, wm.prompt_style,
                         wm.max_overview_chars, max_tokens, data)
    return data
