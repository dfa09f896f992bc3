"""Config section ``simulator``: the synthetic testbed of ``wmrl simulate``.

The testbed (see ``docs/simulate.md``): ``tasks`` tasks, each with ``candidates`` solution approaches of
known true quality; a trajectory picks an approach, and its solution either crashes (true score 0) or
scores the approach's quality. A synthetic world model predicts ``r_hat = phi(r) + offsets + noise``
(``wmrl/simulate/world_model.py``).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Protocol

from wmrl.config_checks import ConfigError, Section, check_range, choice, in_range
from wmrl.simulate.expression import Expression, ExpressionError

if TYPE_CHECKING:  # annotations only: the section must load without the tracking package
    from wmrl.algorithm import AlgorithmConfig
    from wmrl.tracking.config import TrackingConfig

# Distortions phi of the synthetic world model (wmrl/simulate/world_model.py documents each one).
PHIS: tuple[str, ...] = ("identity", "power", "logistic", "bump", "inverted", "noise")
MONOTONE_PHIS: tuple[str, ...] = ("identity", "power", "logistic")
KNOTS = "knots"  # phi = the piecewise-linear curve through phi_knots / drift_knots
NOISE_FAMILIES: tuple[str, ...] = ("gaussian", "student_t")


@dataclass
class CostConfig(Section):
    """GPU-seconds charged per unit of work (defaults: a 4B-9B agent, paper Appendix D budgets).

    Execution dominates: a solution trains a model on its own GPU for up to 1200 s (Appendix D);
    a world-model call is a few forward passes batched with generation.
    """

    KEY: ClassVar[str] = "simulator.cost"
    # one sandboxed execution of one trajectory's solution
    exec_seconds: float = field(default=600.0, metadata=in_range(0.0))
    # one world-model prediction for one trajectory
    wm_call_seconds: float = field(default=10.0, metadata=in_range(0.0))
    # generating one multi-turn trajectory (4 turns x <=4096 tokens)
    gen_seconds: float = field(default=120.0, metadata=in_range(0.0))
    update_seconds: float = field(default=600.0, metadata=in_range(0.0))  # one optimizer step of the learner


@dataclass
class SimulatorConfig(Section):
    KEY: ClassVar[str] = "simulator"
    # The run's length is train.steps, as for every trainer (the testbed's default: 400).
    tasks: int = field(default=16, metadata=in_range(1))
    candidates: int = field(default=16, metadata=in_range(2))  # solution approaches per task
    # The benchmark (qualities, crash rates): null draws a fresh one per run seed (results then average
    # over benchmarks, not only over training noise); an integer fixes one benchmark for all seeds.
    env_seed: int | None = None
    # Approach quality ~ Beta(quality_alpha, quality_beta): most mediocre, few good.
    quality_alpha: float = field(default=2.0, metadata=in_range(0.0, low_open=True))
    quality_beta: float = field(default=4.0, metadata=in_range(0.0, low_open=True))
    # Crash probability of an approach grows with its ambition (quality): p = crash_base + crash_slope*q.
    crash_base: float = field(default=0.05, metadata=in_range(0.0, 1.0))
    crash_slope: float = field(default=0.3, metadata=in_range(0.0, 1.0))
    lr: float = field(default=30.0, metadata=in_range(0.0, low_open=True))  # step size on the policy logits
    # entropy bonus per group (keeps a collapsed task able to recover)
    entropy_coef: float = field(default=0.0, metadata=in_range(0.0))
    # World model: r_hat = clip(phi(r) + task offset + group offset + noise, 0, 1).
    # phi: a named distortion (PHIS), "knots" (piecewise linear through phi_knots), or an arithmetic
    # expression in r such as "0.2 + 0.6*r", "0.3", "1 - (1 - r)**3", "0.5 + 0.4*sin(2*pi*r)"
    # (wmrl/simulate/expression.py: parsed with a whitelist, never eval'd).
    phi: str = "power"
    phi_param: float = 0.3  # power: exponent; logistic: slope; bump: height; inverted: range width
    phi_knots: list[list[float]] | None = None  # [[r, phi(r)], ...] with r increasing, from 0 to 1
    # gaussian: the sd; student_t: the scale of wm_noise * t(wm_noise_df)
    wm_noise: float = field(default=0.03, metadata=in_range(0.0))
    wm_noise_family: str = field(default="gaussian", metadata=choice(NOISE_FAMILIES))
    # student_t degrees of freedom (heavy tails when small)
    wm_noise_df: float = field(default=3.0, metadata=in_range(0.0, low_open=True))
    # sd of an offset shared by a group's trajectories (one misread overview)
    wm_group_sd: float = field(default=0.0, metadata=in_range(0.0))
    # added to r_hat of the first wm_task_offset_frac of the tasks
    wm_task_offset: float = field(default=0.0, metadata=in_range(-1.0, 1.0))
    wm_task_offset_frac: float = field(default=0.5, metadata=in_range(0.0, 1.0))
    # Drift: from this step on phi becomes drift_phi(drift_param) (null: never).
    drift_step: int | None = None
    drift_phi: str = "identity"  # same forms as phi
    drift_param: float = 1.0
    drift_knots: list[list[float]] | None = None
    # Degradation: from this step on the world-model noise becomes degrade_noise (null: never).
    degrade_step: int | None = None
    degrade_noise: float = field(default=0.5, metadata=in_range(0.0))
    # std of the grader's noise on a real execution
    exec_noise: float = field(default=0.0, metadata=in_range(0.0))
    # "executions/compute to reach" this expected true score
    target_score: float = field(default=0.45, metadata=in_range(0.0, 1.0))
    # history (and MLflow metrics) every this many steps
    log_every: int = field(default=5, metadata=in_range(1))
    cost: CostConfig = field(default_factory=CostConfig)

    def check_together(self, prefix: str) -> None:
        if self.crash_base + self.crash_slope > 1.0:
            raise ConfigError(
                f"{prefix}.crash_base + {prefix}.crash_slope = {self.crash_base + self.crash_slope} "
                "must be <= 1 (it is the crash probability of the best approach)"
            )
        _check_phi(prefix, "phi", self.phi, "phi_param", self.phi_param, "phi_knots", self.phi_knots)
        _check_phi(prefix, "drift_phi", self.drift_phi, "drift_param", self.drift_param, "drift_knots",
                   self.drift_knots)

    def check_schedule(self, steps: int, prefix: str = "simulator") -> None:
        """drift_step and degrade_step fall inside the run (its train.steps, known to the whole config)."""
        for key in ("drift_step", "degrade_step"):
            value = getattr(self, key)
            if value is not None:
                check_range(f"{prefix}.{key}", value, 0, steps - 1)


def _check_phi(
    prefix: str, phi_key: str, phi: str, param_key: str, param: float, knots_key: str,
    knots: list[list[float]] | None,
) -> None:
    """phi is a named distortion (its parameter checked), "knots" (the table checked) or an expression."""
    if phi in PHIS:
        _check_phi_param(f"{prefix}.{param_key}", phi, param)
    elif phi == KNOTS:
        _check_knots(f"{prefix}.{knots_key}", knots)
    else:
        try:
            Expression(phi).check_finite()
        except ExpressionError as err:
            raise ConfigError(
                f"{prefix}.{phi_key}: {err} (or one of: {', '.join(PHIS)}, {KNOTS})"
            ) from None


def _check_knots(key: str, knots: list[list[float]] | None) -> None:
    if not knots or len(knots) < 2:
        raise ConfigError(f"{key} must list at least two [r, phi] knots when phi is {KNOTS!r}, got {knots!r}")
    for i, knot in enumerate(knots):
        if len(knot) != 2 or not all(math.isfinite(v) for v in knot):
            raise ConfigError(f"{key}[{i}]={list(knot)!r} must be a pair [r, phi] of finite numbers")
    xs = [k[0] for k in knots]
    if xs[0] != 0.0 or xs[-1] != 1.0 or any(b <= a for a, b in itertools.pairwise(xs)):
        raise ConfigError(f"{key}: the r of the knots must increase strictly from 0 to 1, got {xs}")


def _check_phi_param(key: str, phi: str, value: float) -> None:
    if phi in ("power", "logistic"):
        check_range(key, value, 0.0, low_open=True)  # exponent / slope must be positive
    elif phi == "bump":
        check_range(key, value, 0.0, 1.0)  # height of the over-rating bump
    elif phi == "inverted":
        check_range(key, value, 0.0, 1.0, low_open=True)  # width of the reversed range


class TestbedRunConfig(Protocol):
    """What the testbed reads of a run's config (``wmrl.config.WMRLConfig`` is one): the testbed is a
    part, the composition of every section sits above it and is passed in."""

    simulator: SimulatorConfig
    algorithm: AlgorithmConfig
    tracking: TrackingConfig
    train: RunLength


class RunLength(Protocol):
    """The ``train`` section as the testbed reads it: the run's length, shared by every trainer."""

    steps: int
