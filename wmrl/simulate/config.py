"""Config section ``simulator``: the synthetic testbed of ``wmrl simulate``.

The testbed (see ``docs/simulate.md``): ``tasks`` tasks, each with ``candidates`` solution approaches of
known true quality; a trajectory picks an approach, and its solution either crashes (true score 0) or
scores the approach's quality. A synthetic world model predicts ``r_hat = phi(r) + noise``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from wmrl.config_checks import ConfigError, check_choice, check_range

# Distortions phi of the synthetic world model (wmrl/simulate/world_model.py documents each one).
PHIS: tuple[str, ...] = ("identity", "power", "logistic", "bump", "inverted", "noise")
MONOTONE_PHIS: tuple[str, ...] = ("identity", "power", "logistic")


@dataclass
class CostConfig:
    """GPU-seconds charged per unit of work (defaults: a 4B-9B agent, paper Appendix D budgets).

    Execution dominates: a solution trains a model on its own GPU for up to 1200 s (Appendix D);
    a world-model call is a few forward passes batched with generation.
    """

    exec_seconds: float = 600.0  # one sandboxed execution of one trajectory's solution
    wm_call_seconds: float = 10.0  # one world-model prediction for one trajectory
    gen_seconds: float = 120.0  # generating one multi-turn trajectory (4 turns x <=4096 tokens)
    update_seconds: float = 600.0  # one optimizer step of the learner

    def validate(self, prefix: str = "simulator.cost") -> None:
        for name in ("exec_seconds", "wm_call_seconds", "gen_seconds", "update_seconds"):
            check_range(f"{prefix}.{name}", getattr(self, name), 0.0)


@dataclass
class SimulatorConfig:
    steps: int = 400
    tasks: int = 16
    candidates: int = 16  # solution approaches per task
    # The benchmark (qualities, crash rates): null draws a fresh one per run seed (results then average
    # over benchmarks, not only over training noise); an integer fixes one benchmark for all seeds.
    env_seed: int | None = None
    # Approach quality ~ Beta(quality_alpha, quality_beta): most mediocre, few good.
    quality_alpha: float = 2.0
    quality_beta: float = 4.0
    # Crash probability of an approach grows with its ambition (quality): p = crash_base + crash_slope*q.
    crash_base: float = 0.05
    crash_slope: float = 0.3
    lr: float = 30.0  # step size on the policy logits
    entropy_coef: float = 0.0  # entropy bonus per group (keeps a collapsed task able to recover)
    # World model: r_hat = clip(phi(r) + N(0, wm_noise^2), 0, 1).
    phi: str = "power"
    phi_param: float = 0.3  # power: exponent; logistic: slope; bump: height; inverted: range width
    wm_noise: float = 0.03
    # Drift: from this step on phi becomes drift_phi(drift_param) (null: never).
    drift_step: int | None = None
    drift_phi: str = "identity"
    drift_param: float = 1.0
    # Degradation: from this step on the world-model noise becomes degrade_noise (null: never).
    degrade_step: int | None = None
    degrade_noise: float = 0.5
    exec_noise: float = 0.0  # std of the grader's noise on a real execution
    target_score: float = 0.45  # "executions/compute to reach" this expected true score
    log_every: int = 5  # history (and MLflow metrics) every this many steps
    cost: CostConfig = field(default_factory=CostConfig)

    def validate(self, prefix: str = "simulator") -> None:
        check_range(f"{prefix}.steps", self.steps, 1)
        check_range(f"{prefix}.tasks", self.tasks, 1)
        check_range(f"{prefix}.candidates", self.candidates, 2)
        check_range(f"{prefix}.quality_alpha", self.quality_alpha, 0.0, low_open=True)
        check_range(f"{prefix}.quality_beta", self.quality_beta, 0.0, low_open=True)
        check_range(f"{prefix}.crash_base", self.crash_base, 0.0, 1.0)
        check_range(f"{prefix}.crash_slope", self.crash_slope, 0.0, 1.0)
        if self.crash_base + self.crash_slope > 1.0:
            raise ConfigError(
                f"{prefix}.crash_base + {prefix}.crash_slope = {self.crash_base + self.crash_slope} "
                "must be <= 1 (it is the crash probability of the best approach)"
            )
        check_range(f"{prefix}.lr", self.lr, 0.0, low_open=True)
        check_range(f"{prefix}.entropy_coef", self.entropy_coef, 0.0)
        check_choice(f"{prefix}.phi", self.phi, PHIS)
        check_choice(f"{prefix}.drift_phi", self.drift_phi, PHIS)
        _check_phi_param(f"{prefix}.phi_param", self.phi, self.phi_param)
        _check_phi_param(f"{prefix}.drift_param", self.drift_phi, self.drift_param)
        check_range(f"{prefix}.wm_noise", self.wm_noise, 0.0)
        check_range(f"{prefix}.degrade_noise", self.degrade_noise, 0.0)
        check_range(f"{prefix}.exec_noise", self.exec_noise, 0.0)
        for key in ("drift_step", "degrade_step"):
            value = getattr(self, key)
            if value is not None:
                check_range(f"{prefix}.{key}", value, 0, self.steps - 1)
        check_range(f"{prefix}.target_score", self.target_score, 0.0, 1.0)
        check_range(f"{prefix}.log_every", self.log_every, 1)
        self.cost.validate(f"{prefix}.cost")


def _check_phi_param(key: str, phi: str, value: float) -> None:
    if phi in ("power", "logistic"):
        check_range(key, value, 0.0, low_open=True)  # exponent / slope must be positive
    elif phi == "bump":
        check_range(key, value, 0.0, 1.0)  # height of the over-rating bump
    elif phi == "inverted":
        check_range(key, value, 0.0, 1.0, low_open=True)  # width of the reversed range
