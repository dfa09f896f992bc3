"""The solutions the world model learns from, really executed once: its SFT's variants and the
executed-solution memory's examples (with the initial policy's own samples).

- :func:`world_model_sft_variants`: the training tasks' non-held-out variants ``wmrl sft`` executes and
  trains the world model on (:mod:`wmrl.world_model_data.variants`), less those the static pre-check
  settles when it is on (:func:`left_to_the_world_model`);
- :func:`memory_examples`: what the executed-solution memory (:mod:`wmrl.world_model.memory`) starts
  from: those variants, every non-held-out reference with its leaderboard score, the agent's own
  mistakes and :func:`policy_samples`;
- :func:`executed_outcomes`: their real outcomes, executed in the run's sandbox once and cached by content.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from wmrl.agent.parse import parse_reply
from wmrl.io import atomic_write_json, read_json
from wmrl.sandbox import limits_from_config, make_backend
from wmrl.world_model.memory import Executed
from wmrl.world_model.precheck import DataInventory, PreCheck
from wmrl.world_model_data.variants import (
    AGENT_MISTAKES,
    POLICY_SAMPLE,
    REFERENCE,
    Outcome,
    SolutionVariant,
    all_references,
    cache_dir,
    clean_reference,
    make_variants,
    real_outcomes,
)

if TYPE_CHECKING:  # annotations only
    from wmrl.sandbox.config import SandboxConfig
    from wmrl.world_model.config import WorldModelConfig


class ExecutionRunConfig(Protocol):
    """The sections of a run's config that executing the world model's examples reads
    (:class:`~wmrl.config.WMRLConfig` is one)."""

    sandbox: SandboxConfig
    world_model: WorldModelConfig


def left_to_the_world_model(variants: Sequence[SolutionVariant], tasks: Sequence[Any], runtime: Any) -> list[SolutionVariant]:
    """The variants the static pre-check does not settle. A run with the pre-check on never asks the
    world model about the others, and training on them (most of the broken variants) taught a tiny
    model to answer "No module named ..." whatever the code."""
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


def executed_outcomes(cfg: ExecutionRunConfig, tasks: Sequence[Any], variants: Sequence[SolutionVariant], runtime: Any,
                      progress: bool = True) -> dict[str, Outcome]:
    """The variants' real outcomes (``real_outcomes``: executed in the run's sandbox with the world model's
    variant time budget, once; cached by content)."""
    sandbox = replace(cfg.sandbox, timeout_s=min(cfg.sandbox.timeout_s, cfg.world_model.variant_timeout_s))
    with tempfile.TemporaryDirectory(prefix="wmrl-variants-") as work:
        return real_outcomes(list(variants), {t.task_id: t for t in tasks}, make_backend(sandbox),
                             limits_from_config(sandbox), runtime, Path(work), progress=progress)


def memory_examples(cfg: ExecutionRunConfig, tasks: Sequence[Any], runtime: Any, samples: Sequence[SolutionVariant] = (),
                    progress: bool = True, cost: dict[str, float] | None = None) -> list[Executed]:
    """What the executed-solution memory starts from (``world_model.memory``): every reference of the
    training tasks that is not held out, with its leaderboard score; the broken variants the world
    model's SFT executes (cached: nothing new runs after ``wmrl sft``), and those references with the
    agent's own mistakes (``AGENT_MISTAKES``); and ``samples`` (:func:`policy_samples`). Each is
    executed once, cached by content; the ones the pre-check settles are left out when it is on (a run
    never asks the world model about them).

    ``cost``, when given, receives what the memory's own executions cost (those beyond the SFT's, whose
    cost is the SFT's): ``executions``, ``seconds_execution`` (the sum of each outcome's recorded wall
    seconds) and ``cpu_seconds_execution`` (of their programs' CPU time; None when one of them was cached
    before that was recorded), the same whether they ran now or were read from the cache."""
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
        cpu = [o.cpu_seconds for o in own]
        cost.update(executions=len(own), seconds_execution=float(sum(o.seconds for o in own)),
                    cpu_seconds_execution=None if None in cpu else float(sum(cpu)))
    return [Executed(v.task_id, clean_reference(v.code), outcomes[v.key].score, outcomes[v.key].valid)
            for v in variants]


def _samples_file(policy: Any, tasks: Sequence[Any], per_task: int, seed: int, build: str | None) -> Path:
    """Where :func:`policy_samples` caches the samples of ``build`` (their ``.cost.json`` beside them)."""
    params = policy.params
    key = hashlib.sha256(json.dumps([build, [t.task_id for t in tasks], per_task, seed, params.temperature,
                                     params.top_p, params.max_new_tokens]).encode()).hexdigest()[:16]
    return cache_dir().parent / "policy_samples" / f"{key}.json"


class DrawingClock:
    """What drawing samples costs: wall seconds and this process's CPU time (the generation runs in it)."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def cost(self, samples: int) -> dict[str, float]:
        return {"samples": samples, "seconds_generation": time.perf_counter() - self.wall,
                "cpu_seconds_generation": time.process_time() - self.cpu}


def policy_samples_cost(policy: Any, tasks: Sequence[Any], per_task: int, seed: int,
                        build: str | None) -> dict[str, float] | None:
    """What drawing :func:`policy_samples`' samples of ``build`` cost when they were drawn (``samples``,
    ``seconds_generation``, ``cpu_seconds_generation`` since round 23); None when they were drawn before
    the cost was recorded, or not cached."""
    record = _samples_file(policy, tasks, per_task, seed, build).with_suffix(".cost.json")
    return read_json(record) if build is not None and record.is_file() else None


def policy_samples(policy: Any, tasks: Sequence[Any], per_task: int, seed: int,
                   build: str | None = None) -> list[SolutionVariant]:
    """``per_task`` first-turn solutions ``policy`` (an :class:`~wmrl.agent.policy.AgentPolicy`) writes
    for each of ``tasks`` with its sampling params, seeded by ``seed``: the distribution the world model
    meets when a run starts. With ``build`` (the policy's build hash: the tiny default's SFT) the samples
    are cached under it, so every run and seed from that policy samples once."""
    if per_task == 0:
        return []
    ids = [t.task_id for t in tasks]
    params = policy.params
    cached = _samples_file(policy, tasks, per_task, seed, build)
    if build is not None and cached.is_file():
        codes = read_json(cached)
    else:
        clock = DrawingClock()
        drawn_for = [task_id for task_id in ids for _ in range(per_task)]
        prompts = [policy.first_prompt(task_id) for task_id in drawn_for]
        seeds = [int(s) for s in np.random.default_rng([seed, per_task]).integers(0, 2**31 - 1, len(prompts))]
        generations = policy.generator.generate(prompts, params, seeds=seeds)
        codes = [[task_id, parse_reply(g.text).code] for task_id, g in zip(drawn_for, generations, strict=True)]
        if build is not None:
            # what drawing them cost, beside them: a one-time cost of the memory that every later run
            # from this build reads back (policy_samples_cost) instead of paying it
            atomic_write_json(cached.with_suffix(".cost.json"), clock.cost(len(codes)))
            atomic_write_json(cached, codes)
    return [SolutionVariant(task_id, POLICY_SAMPLE, POLICY_SAMPLE, code, False, 0.0)
            for task_id, code in codes if code]
