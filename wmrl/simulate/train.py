"""One simulated WMRL training run over the synthetic benchmark (``wmrl simulate``).

The step itself (sample -> score -> calibrate -> weight -> update) is ``wmrl.simulate.step.wmrl_step``;
here its scores come from the synthetic environment: a rollout draws each solution's true score, an
anchor "execution" is the grader's (noisy) report of it. This module adds the run's bookkeeping:
cost to reach the target score, logged history, the fitted map and the audit at the end.
Groups a variant does not train on (grpo_real/grpo_anchor_only) are not generated at all.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from wmrl.algorithm import get_variant
from wmrl.calibration.calibrator import AUDIT_NAME, STATE_NAME, Calibrator
from wmrl.calibration.pool import LOG_NAME
from wmrl.config import WMRLConfig
from wmrl.simulate.cost import CostMeter
from wmrl.simulate.environment import Environment, make_environment
from wmrl.simulate.policy import SoftmaxPolicy
from wmrl.simulate.step import wmrl_step
from wmrl.simulate.world_model import SyntheticWorldModel

MAP_GRID = np.linspace(0.0, 1.0, 101)
HISTORY_KEYS = ("score", "executions", "gpu_hours", "rho", "eta2", "n_pairs")


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


def _audit_warned(audit: dict[str, Any] | None) -> bool:
    """Did any audit of the run warn (the run-level verdict)?"""
    if not audit:
        return False
    if "warned_during_run" in audit:
        return bool(audit["warned_during_run"])
    for key in ("warn", "warning", "warns", "trusted"):
        if key in audit:
            return (not audit[key]) if key == "trusted" else bool(audit[key])
    return bool(audit.get("warnings"))


@dataclass
class SyntheticScores:
    """``ScoreSource`` of the synthetic benchmark; draws from the run's RNG (the step's order)."""

    env: Environment
    rng: np.random.Generator

    @property
    def n_tasks(self) -> int:
        return self.env.n_tasks

    def task_id(self, task: int) -> str:
        return str(task)

    def rollout(self, tasks: np.ndarray, actions: np.ndarray) -> np.ndarray:
        return self.env.rollout(tasks, actions, self.rng)

    def execute(
        self, tasks: np.ndarray, actions: np.ndarray, scores: np.ndarray, anchor: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        executed = np.full(scores.shape, np.nan)
        executed[anchor] = self.env.execute(scores[anchor], self.rng)  # a synthetic execution never fails
        return executed, anchor


def pool_directory(pool_root: Path, variant: str, seed: int) -> Path:
    """Where a run's calibration state (the anchor-pair log ``pairs.jsonl``, ``calibrator.json``,
    ``audit.json``) is kept: ``POOL_ROOT/VARIANT-seedSEED``. Files of an earlier run there are replaced."""
    directory = Path(pool_root) / f"{variant}-seed{seed}"
    for name in (LOG_NAME, STATE_NAME, AUDIT_NAME):  # only what a Calibrator writes
        (directory / name).unlink(missing_ok=True)
    return directory


def train(cfg: WMRLConfig, variant_name: str, seed: int, pool_root: Path | None = None) -> RunResult:
    """One run; with ``pool_root`` its anchor pairs are logged on disk as they arrive (see
    :func:`pool_directory`), the same files the coordinator keeps in ``RUN_DIR/calibration``."""
    import time

    started = time.perf_counter()
    sim, alg = cfg.simulator, cfg.algorithm
    variant = get_variant(variant_name)
    rng = np.random.default_rng(seed)
    env = make_environment(sim, seed)
    wm = SyntheticWorldModel(sim)
    policy = SoftmaxPolicy(env.n_tasks, env.n_candidates)
    meter = CostMeter(sim.cost)
    calibrator = (
        Calibrator(
            replace(alg, variant=variant_name, seed=seed),
            None if pool_root is None else pool_directory(pool_root, variant_name, seed),
            debias=variant.debias, denoise=variant.denoise,
        )
        if variant.trains_on_wm and variant.needs_anchors
        else None
    )
    result = RunResult(
        variant=variant_name, seed=seed, optimum=env.optimum(), initial_score=env.score(policy.probs()),
        final_score=float("nan"), executions=0, gpu_hours=0.0, wm_calls=0,
        target_step=None, target_executions=None, target_gpu_hours=None,
        history={key: [] for key in HISTORY_KEYS},
    )

    source = SyntheticScores(env, rng)
    # The audit runs whenever refit_every new pairs arrived after warm-up (at every refit when
    # debiasing), as in the coordinator; its persistence rule needs the whole sequence.
    next_audit, last_audit, warned = alg.min_pairs, None, []
    for step in range(sim.steps):
        done = wmrl_step(
            step, variant=variant, alg=alg, source=source, policy=policy,
            world_model=wm if variant.trains_on_wm else None, calibrator=calibrator, meter=meter, rng=rng,
            lr=sim.lr, entropy_coef=sim.entropy_coef,
        )
        if calibrator is not None and len(calibrator.pool) >= next_audit:
            last_audit = calibrator.audit()
            warned += [c for c in last_audit.streaks if c in last_audit.flags
                       and last_audit.streaks[c] >= last_audit.thresholds.persist and c not in warned]
            next_audit = len(calibrator.pool) + alg.refit_every
        score = env.score(policy.probs())
        if result.target_step is None and score >= sim.target_score:
            result.target_step, result.target_executions = step + 1, meter.executions
            result.target_gpu_hours = meter.gpu_hours
        if (step + 1) % sim.log_every == 0 or step == sim.steps - 1:
            snap = calibrator.snapshot() if calibrator is not None else {}
            result.steps.append(step + 1)
            for key, value in (
                ("score", score), ("executions", meter.executions), ("gpu_hours", meter.gpu_hours),
                ("rho", done.rho), ("eta2", snap.get("eta2")), ("n_pairs", snap.get("n_pairs", 0)),
            ):
                result.history[key].append(float("nan") if value is None else float(value))

    result.final_score = env.score(policy.probs())
    result.executions, result.wm_calls, result.gpu_hours = meter.executions, meter.wm_calls, meter.gpu_hours
    if calibrator is not None:
        if last_audit is not None:
            result.audit = {**_audit_summary(last_audit), "warned_during_run": warned}
        if calibrator.directory is not None:
            calibrator.save()
        if variant.debias:
            result.fitted_map = calibrator.calibrate(MAP_GRID).tolist()
        pred, tru = calibrator.pool.arrays()
        keep = np.linspace(0, len(pred) - 1, min(len(pred), 2000)).astype(int) if len(pred) else []
        result.pool_sample = [[float(pred[i]), float(tru[i])] for i in keep]
    result.wall_seconds = time.perf_counter() - started
    return result
