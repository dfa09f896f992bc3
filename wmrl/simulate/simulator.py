"""The synthetic simulator trainer: one (variant, seed) run of ``wmrl simulate``.

The step is the one every trainer runs (:func:`wmrl.step.wmrl_step`); here its parts are the simulator's
(:mod:`wmrl.simulate.softmax`): a softmax policy over the synthetic benchmark's approaches, a synthetic
execution (the true score, plus grader noise) and a synthetic world model ``r_hat = phi(r) + noise``.
Compute is **modelled** (``cost_source: modelled``): the :class:`~wmrl.simulate.cost.CostMeter` prices
the step's counts of executions, world-model calls, trajectories and updates with ``simulator.cost``
(nothing real runs, so there is nothing to measure). This module adds the run's bookkeeping: cost to
reach the target score, logged history, the fitted map and the audit at the end.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from wmrl.anchor_rule import REASONS
from wmrl.loop import LoopShell
from wmrl.simulate.benchmark import Benchmark, make_benchmark
from wmrl.simulate.config import SimulatorConfig, TestbedRunConfig
from wmrl.simulate.cost import CostMeter
from wmrl.simulate.policy import SoftmaxPolicy
from wmrl.simulate.softmax import (
    SoftmaxAgent,
    SoftmaxLearner,
    SyntheticExecution,
    SyntheticWorldModelEnv,
    printed_score,
    synthetic_solutions,
)
from wmrl.simulate.world_model import SyntheticWorldModel

COST_SOURCE = "modelled"  # GPU-hours from simulator.cost, not measured
MAP_GRID = np.linspace(0.0, 1.0, 101)
HISTORY_KEYS = ("score", "executions", "gpu_hours", "rho", "eta2", "eta2_cal", "n_pairs", "anchor_frac",
                "anchor_reason")


@dataclass
class RunResult:
    """Everything one (variant, seed) run reports; plain types so it crosses process boundaries."""

    variant: str
    seed: int
    optimum: float  # J*
    initial_score: float
    final_score: float
    executions: int
    gpu_hours: float
    wm_calls: int
    # First step at which the expected true score reached the target (None: never), and the cost then.
    target_step: int | None
    target_executions: int | None
    target_gpu_hours: float | None
    steps: list[int] = field(default_factory=list)  # logged steps (history index)
    history: dict[str, list[float]] = field(default_factory=dict)
    fitted_map: list[float] | None = None  # f_hat on MAP_GRID at the end (debiasing variants)
    pool_sample: list[list[float]] | None = None  # up to 2000 (r_hat, r) pairs for the plot
    audit: dict[str, Any] | None = None
    wall_seconds: float = 0.0
    cpu_seconds: float = 0.0  # this process's CPU time for the run: what wall time would be on an idle core
    cost_source: str = COST_SOURCE
    phase_seconds: dict[str, float] = field(default_factory=dict)  # GPU-seconds per phase (CostMeter)


def _audit_summary(report: Any) -> dict[str, Any]:
    """A JSON-friendly view of the calibration layer's AuditReport (whatever fields it carries)."""
    data = dataclasses.asdict(report) if dataclasses.is_dataclass(report) else dict(vars(report))
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, (np.floating, np.integer)):
            value = value.item()
        if isinstance(value, float) and not np.isfinite(value):
            value = None
        out[key] = value
    return out


def audit_warned(audit: dict[str, Any] | None) -> bool:
    """Did any audit of the run warn (the run-level verdict)?"""
    if not audit:
        return False
    if "warned_during_run" in audit:
        return bool(audit["warned_during_run"])
    for key in ("warn", "warning", "warns", "trusted"):
        if key in audit:
            return (not audit[key]) if key == "trusted" else bool(audit[key])
    return bool(audit.get("warnings"))


def pool_directory(pool_root: Path, variant: str, seed: int) -> Path:
    """Where a run's calibration state (the anchor-pair log ``pairs.jsonl``, ``calibrator.json``,
    ``audit.json``) is kept: ``POOL_ROOT/VARIANT-seedSEED``. Files of an earlier run there are replaced
    (:func:`wmrl.loop.clear_calibration`)."""
    return Path(pool_root) / f"{variant}-seed{seed}"


@dataclass
class SimulatedParts:
    """The step's parts of one simulated run: the synthetic benchmark, its softmax policy (agent and
    learner), the synthetic execution and world model; the two environments draw from ``rng``."""

    bench: Benchmark
    task_ids: list[str]
    policy: SoftmaxPolicy
    agent: SoftmaxAgent
    learner: SoftmaxLearner
    execution: SyntheticExecution
    world_model: SyntheticWorldModelEnv


def simulated_parts(sim: SimulatorConfig, seed: int, rng: np.random.Generator) -> SimulatedParts:
    bench = make_benchmark(sim, seed)
    task_ids = [str(t) for t in range(bench.n_tasks)]
    index = {t: i for i, t in enumerate(task_ids)}
    policy = SoftmaxPolicy(bench.n_tasks, bench.n_candidates)
    wm = SyntheticWorldModelEnv(SyntheticWorldModel(sim), lambda sub: printed_score(sub.code), rng, index)
    return SimulatedParts(bench, task_ids, policy, SoftmaxAgent(policy, index, synthetic_solutions(bench)),
                          SoftmaxLearner(policy, index, sim.lr, sim.entropy_coef), SyntheticExecution(bench, rng), wm)


def train(cfg: TestbedRunConfig, variant_name: str, seed: int, pool_root: Path | None = None) -> RunResult:
    """One run; with ``pool_root`` its anchor pairs are logged on disk as they arrive (see
    :func:`pool_directory`), the same files the coordinator keeps in ``RUN_DIR/calibration``."""
    started, cpu_started = time.perf_counter(), time.process_time()
    sim, alg = cfg.simulator, dataclasses.replace(cfg.algorithm, variant=variant_name, seed=seed)
    alg.validate()  # the config was validated for its own variant; a sweep runs others (once, not per step)
    directory = None if pool_root is None else pool_directory(pool_root, variant_name, seed)
    # nobody resumes a simulate run: its pool log is written for people to read, without an fsync per step
    shell = LoopShell(alg, directory, durable=False)
    variant, calibrator = shell.variant, shell.calibrator
    rng = np.random.default_rng(seed)
    parts = simulated_parts(sim, seed, rng)
    bench, policy, wm = parts.bench, parts.policy, parts.world_model
    meter = CostMeter(sim.cost)
    result = RunResult(
        variant=variant_name, seed=seed, optimum=bench.optimum(), initial_score=bench.score(policy.probs()),
        final_score=float("nan"), executions=0, gpu_hours=0.0, wm_calls=0,
        target_step=None, target_executions=None, target_gpu_hours=None,
        history={key: [] for key in HISTORY_KEYS},
    )
    for step in range(cfg.train.steps):
        wm.step = step
        done, _ = shell.step(step, task_pool=parts.task_ids, policy=parts.agent, executed_env=parts.execution,
                             world_model_env=wm, learner=parts.learner, rng=rng)
        meter.charge(executions=done.executions, wm_calls=done.wm_calls,
                     trajectories=done.anchor.size * alg.group_size, updates=1)
        score = bench.score(policy.probs())
        if result.target_step is None and score >= sim.target_score:
            result.target_step, result.target_executions = step + 1, meter.executions
            result.target_gpu_hours = meter.gpu_hours
        if (step + 1) % sim.log_every == 0 or step == cfg.train.steps - 1:
            snap = calibrator.snapshot() if calibrator is not None else {}
            result.steps.append(step + 1)
            for key, value in (
                ("score", score), ("executions", meter.executions), ("gpu_hours", meter.gpu_hours),
                ("rho", done.rho), ("eta2", snap.get("eta2")), ("eta2_cal", snap.get("eta2_cal")),
                ("n_pairs", snap.get("n_pairs", 0)),
                # the share of the m groups really executed this step (the anchor rule's choice) and why
                # (the index in REASONS, as the metric anchor/reason of the other trainers)
                ("anchor_frac", int(done.anchor.sum()) / alg.groups_per_step),
                ("anchor_reason", REASONS.index(done.anchor_reason)),
            ):
                result.history[key].append(float("nan") if value is None else float(value))

    result.final_score = bench.score(policy.probs())
    result.executions, result.wm_calls, result.gpu_hours = meter.executions, meter.wm_calls, meter.gpu_hours
    result.phase_seconds = meter.phase_seconds()
    if calibrator is not None:
        if shell.last_audit is not None:  # the audit's persistence rule needs the whole sequence
            result.audit = {**_audit_summary(shell.last_audit), "warned_during_run": shell.warned}
        if calibrator.directory is not None:
            calibrator.save()
        if variant.debias:
            result.fitted_map = calibrator.calibrate(MAP_GRID).tolist()
        pred, tru = calibrator.pool.arrays()
        keep = np.linspace(0, len(pred) - 1, min(len(pred), 2000)).astype(int) if len(pred) else []
        result.pool_sample = [[float(pred[i]), float(tru[i])] for i in keep]
    result.wall_seconds = time.perf_counter() - started
    result.cpu_seconds = time.process_time() - cpu_started
    return result
