"""The LLM trainer's parts, built from a run's config: what a step calls and nothing of the step loop.

:func:`assemble` reads the initial policy pinned in the run directory (resolved by the trainer's
``prepare`` hook in :mod:`wmrl.trainer_registry` before the trainer starts: a resume never swaps the
reference or the world model), loads the task pool, leads the learner ranks and places the generator on
this rank (``generation.vllm.placement``), and builds the agent, the executed environment (anchors) and,
when the variant calls it, the world-model environment with its backend and executed-solution memory.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wmrl.agent.policy import AgentPolicy
from wmrl.config import WMRLConfig
from wmrl.execution.executed import ExecutedEnvironment, Runner
from wmrl.generation.base import Generator
from wmrl.generation.data_parallel import place_on_rank
from wmrl.generation.factory import build_generator
from wmrl.generation.shared_prefix import sharing_prefixes
from wmrl.io import atomic_write_json
from wmrl.learner.follower import PlacedLearner, lead
from wmrl.models.cache import built_hash
from wmrl.models.kernels import log_kernels
from wmrl.sft.data import run_context
from wmrl.sft.pipeline import INITIAL_POLICY, read_pinned_initial_policy
from wmrl.storage.rundir import RunDir
from wmrl.tasks.overview import task_overview
from wmrl.tasks.pool import load_pool, resolve_pool_root
from wmrl.tasks.task import Task
from wmrl.trainers.llm.names import MEMORY_BUILD, MEMORY_LOG
from wmrl.world_model.backends import HTTPBackend, InProcessBackend
from wmrl.world_model.env import TaskCase, WorldModelEnvironment
from wmrl.world_model.memory import Executed, ExecutedMemory, OnlineLog
from wmrl.world_model_data.examples import (
    DrawingClock,
    memory_examples,
    policy_samples,
    policy_samples_cost,
)

log = logging.getLogger(__name__)
EVAL_SPLITS = ("train", "heldout")


@dataclass
class RunTasks:
    every: list[Task]  # the whole pool (the world model knows every task's case)
    train: list[Task]  # what the steps draw from (``tasks.split``)
    evaluated: dict[str, list[Task]]  # split -> the tasks the paper's metric is taken on


@dataclass
class LLMParts:
    """Everything a step and its bookkeeping call, built once per start of the run."""

    model_path: Path  # the pinned initial policy: learner start, KL reference, in-process world model
    tasks: RunTasks
    learner: PlacedLearner
    generator: Generator
    policy: AgentPolicy
    executed_env: ExecutedEnvironment
    world_model: WorldModelEnvironment | None  # None: the variant never calls it
    memory_offline: list[Executed]  # the memory's solutions executed before the run (policy samples included)
    memory_log: OnlineLog  # the anchors it learned during the run, per step (replayed on resume)


def pinned_policy(run: RunDir) -> Path:
    pinned = read_pinned_initial_policy(run.path, log=log.info)
    if pinned is None:
        raise RuntimeError(f"no initial policy pinned in {run.path / INITIAL_POLICY}: start the run with "
                           "`wmrl launch` or `wmrl train`, which resolve it (building it if needed) first")
    return pinned


def run_tasks(cfg: WMRLConfig) -> RunTasks:
    root = resolve_pool_root(cfg.tasks)
    competitions = Path(cfg.tasks.competitions_dir) if cfg.tasks.competitions_dir else None
    every = load_pool(root, "all", competitions)
    train = [t for t in every if t.split == (cfg.tasks.split if cfg.tasks.split != "all" else t.split)]
    if not train:
        raise ValueError(f"no task of split {cfg.tasks.split!r} in the pool at {root}")
    return RunTasks(every, train, {split: [t for t in every if t.split == split] for split in EVAL_SPLITS})


def world_model_backend(cfg: WMRLConfig, model_path: Path, stop: threading.Event | None = None) -> Any:
    """The frozen initial policy in this process (a second copy, never synced), or an endpoint (which
    abandons its requests once ``stop`` is set)."""
    wm = cfg.world_model
    if wm.backend == "http":
        return HTTPBackend(wm.url, wm.model or str(model_path), wm.max_new_tokens, wm.temperature,
                           wm.seed, concurrency=wm.concurrency, timeout_s=wm.timeout_s, retries=wm.retries,
                           stop=stop)
    frozen = build_generator(model_path, cfg.generation, cfg.model.dtype)
    if wm.share_prefixes:
        frozen = sharing_prefixes(frozen, wm.batch_size)
    return InProcessBackend(frozen, wm.max_new_tokens, wm.temperature, wm.seed)


def offline_memory(cfg: WMRLConfig, run: RunDir, model_path: Path, policy: AgentPolicy, tasks: RunTasks,
                   runtime: Any) -> list[Executed]:
    """``world_model.memory``: the solutions of known outcome the memory starts from (the references'
    variants and samples of the initial policy, executed once per SFT build and cached), with their
    one-time cost recorded in ``MEMORY_BUILD`` on the run's first start."""
    started = time.perf_counter()
    build = built_hash(model_path)
    sampling = (policy, tasks.train, cfg.world_model.memory_policy_samples, cfg.world_model.seed)
    clock = DrawingClock()
    samples = policy_samples(*sampling, build)
    # without a build hash nothing is cached: the samples were drawn just now, at this cost
    drawing = policy_samples_cost(*sampling, build) if build is not None else clock.cost(len(samples))
    cost: dict[str, Any] = {"build": build, **(drawing or {})}
    offline = memory_examples(cfg, tasks.every, runtime, samples, progress=False, cost=cost)
    if not run.path.joinpath(MEMORY_BUILD).is_file():  # a resume keeps the first start's record
        atomic_write_json(run.path / MEMORY_BUILD, cost)
    log.info("executed-solution memory: %d solutions of known outcome (%d samples of the initial policy), "
             "%.1f s", len(offline), len(samples), time.perf_counter() - started)
    return offline


def assemble(cfg: WMRLConfig, run: RunDir, runner: Runner, calls_world_model: bool) -> LLMParts:
    """The run's parts on this rank (rank 0 leads the other learner ranks, wmrl/learner/follower.py)."""
    model_path = pinned_policy(run)
    tasks = run_tasks(cfg)
    agent_ctx, _, runtime = run_context(cfg)
    leader = lead(cfg.learner, model_path)
    log_kernels(leader.engine.module)
    # generation.vllm.placement: colocated vLLM takes turns with the learner on its GPU (colocation.py),
    # one engine per learner rank, each drawing a share of every call (data_parallel.py)
    learner, generator = place_on_rank(leader, model_path, leader.channel, cfg.generation, cfg.model.dtype)
    overviews = {t.task_id: task_overview(t) for t in tasks.every}
    policy = AgentPolicy(generator, cfg.sampling.params(), overviews, cfg.agent, agent_ctx)
    executed_env = ExecutedEnvironment(runner, run.run_id, cfg.sandbox.timeout_s, cfg.launch,
                                       cfg.sandbox.max_wall_factor)
    offline: list[Executed] = []
    world_model = None
    if calls_world_model:
        memory = None
        if cfg.world_model.memory:  # the executed-solution memory answers the quality check
            offline = offline_memory(cfg, run, model_path, policy, tasks, runtime)
            memory = ExecutedMemory(offline)
        cases = {t.task_id: TaskCase.from_task(t) for t in tasks.every}
        world_model = WorldModelEnvironment(world_model_backend(cfg, model_path, runner.stop_event), cases, cfg.world_model,
                                            runtime, cfg.sandbox.timeout_s, cfg.sandbox.gpus, memory)
    return LLMParts(model_path, tasks, learner, generator, policy, executed_env, world_model, offline,
                    OnlineLog(run.path / MEMORY_LOG))
