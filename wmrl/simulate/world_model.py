"""Synthetic world model: ``r_hat = clip(phi(r) + task offset + group offset + noise, 0, 1)`` (paper
§3.3: bias + noise).

The distortion ``phi`` (``simulator.phi``) is a named one below (strength ``simulator.phi_param``),
``knots`` (piecewise linear through ``simulator.phi_knots``, ``[[r, phi], ...]``), or a whitelisted
arithmetic expression in ``r`` (``0.2 + 0.6*r`` has an intercept, ``0.3`` is a constant, ``1 - (1 -
r)**3``, ``0.5 + 0.4*sin(2*pi*r)``; ``wmrl/simulate/expression.py``). Named ones:

- ``identity``: an unbiased world model.
- ``power``: ``r ** a``; ``a < 1`` is *overconfident* (concave: any solution that runs looks good).
- ``logistic``: a sigmoid of slope ``k`` centred at 0.5, rescaled to map 0 -> 0 and 1 -> 1
  (over-separates the middle, squashes both ends).
- ``bump``: ``r + h * exp(-((r - 0.35) / 0.08)^2 / 2)``: over-rates a band of mediocre solutions
  (non-monotone: a 0.35 solution looks better than a 0.6 one).
- ``inverted``: reverses the order of true scores inside ``[0.5 - w/2, 0.5 + w/2]`` (non-monotone).
- ``noise``: ``r_hat`` is drawn uniformly, independent of ``r`` (the world model knows nothing).

Errors users meet beyond one global phi plus Gaussian noise:

- ``wm_noise_family: student_t``: noise ``wm_noise * t(wm_noise_df)``, heavy-tailed (a few wild misreads);
- ``wm_group_sd``: an offset ``N(0, wm_group_sd^2)`` shared by the trajectories of one group (an LLM
  world model misreads a task's overview once for the whole group);
- ``wm_task_offset``: an offset on the first ``wm_task_offset_frac`` of the tasks (bias that differs by
  task, which one global debiasing map cannot correct).

Drift (``drift_step``) switches ``phi`` to ``drift_phi``; degradation (``degrade_step``) raises the
noise to ``degrade_noise``. Both model a world model that stops matching the policy's solutions.
RNG: the offsets and the Student-t noise draw only when set, so default runs draw exactly as before.
"""

from __future__ import annotations

import numpy as np

from wmrl.simulate.config import KNOTS, SimulatorConfig
from wmrl.simulate.expression import Expression

BUMP_CENTRE, BUMP_WIDTH = 0.35, 0.08


def _sigmoid(x: np.ndarray | float) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.asarray(x, dtype=float)))


def apply_phi(
    name: str, param: float, r: np.ndarray, rng: np.random.Generator | None = None,
    knots: list[list[float]] | None = None,
) -> np.ndarray:
    """``phi(r)`` before noise and clipping. ``noise`` needs ``rng`` (its output ignores ``r``);
    ``knots`` needs the table; any other name that is not listed is parsed as an expression in r."""
    r = np.asarray(r, dtype=float)
    if name == KNOTS:
        if not knots:
            raise ValueError("phi='knots' needs its table of [r, phi] knots")
        table = np.asarray(knots, dtype=float)
        return np.interp(r, table[:, 0], table[:, 1])
    if name == "identity":
        return r.copy()
    if name == "power":
        return r**param
    if name == "logistic":
        lo, hi = _sigmoid(-param / 2), _sigmoid(param / 2)
        return (_sigmoid(param * (r - 0.5)) - lo) / (hi - lo)
    if name == "bump":
        return r + param * np.exp(-0.5 * ((r - BUMP_CENTRE) / BUMP_WIDTH) ** 2)
    if name == "inverted":
        lo, hi = 0.5 - param / 2, 0.5 + param / 2
        return np.where((r >= lo) & (r <= hi), lo + hi - r, r)
    if name == "noise":
        if rng is None:
            raise ValueError("phi='noise' draws its scores and needs an rng")
        return rng.random(r.shape)
    return _expression(name)(r)


_EXPRESSIONS: dict[str, Expression] = {}


def _expression(text: str) -> Expression:
    """Parsed once per process (phi is evaluated at every step)."""
    if text not in _EXPRESSIONS:
        _EXPRESSIONS[text] = Expression(text)
    return _EXPRESSIONS[text]


class SyntheticWorldModel:
    """Scores true outcomes the way a biased, noisy world model would; the phase depends on the step."""

    def __init__(self, cfg: SimulatorConfig) -> None:
        self.cfg = cfg

    def phi_at(self, step: int) -> tuple[str, float, list[list[float]] | None]:
        cfg = self.cfg
        if cfg.drift_step is not None and step >= cfg.drift_step:
            return cfg.drift_phi, cfg.drift_param, cfg.drift_knots
        return cfg.phi, cfg.phi_param, cfg.phi_knots

    def noise_at(self, step: int) -> float:
        cfg = self.cfg
        if cfg.degrade_step is not None and step >= cfg.degrade_step:
            return cfg.degrade_noise
        return cfg.wm_noise

    def one_draw_per_score(self, step: int) -> bool:
        """Whether :meth:`predict` draws nothing but one noise value per score at ``step`` (no uniform
        ``noise`` phi, no group offset): then one call for many groups draws the very numbers that one
        call per group draws, in the same order."""
        return self.phi_at(step)[0] != "noise" and self.cfg.wm_group_sd == 0

    def mean_curve(self, r: np.ndarray, step: int) -> np.ndarray:
        """``phi(r)`` clipped to [0,1] at ``step`` (for plots; NaN for the uninformative ``noise``)."""
        name, param, knots = self.phi_at(step)
        if name == "noise":
            return np.full(np.shape(r), np.nan)
        return np.clip(apply_phi(name, param, r, knots=knots), 0.0, 1.0)

    def predict(
        self, true: np.ndarray, step: int, rng: np.random.Generator, tasks: np.ndarray | None = None
    ) -> np.ndarray:
        """World-model scores ``r_hat`` in [0,1] for solutions of true score ``true`` (G, n) at ``step``;
        ``tasks`` (G,): each row's task index (needed by ``wm_task_offset``)."""
        cfg = self.cfg
        name, param, knots = self.phi_at(step)
        sigma = self.noise_at(step)
        mean = apply_phi(name, param, true, rng, knots)
        if cfg.wm_task_offset:
            if tasks is None:
                raise ValueError("simulator.wm_task_offset needs the task of each group")
            biased = np.asarray(tasks) < round(cfg.wm_task_offset_frac * cfg.tasks)
            mean = mean + np.where(biased, cfg.wm_task_offset, 0.0).reshape(-1, *([1] * (mean.ndim - 1)))
        if cfg.wm_group_sd > 0 and mean.ndim == 2:
            mean = mean + rng.normal(0.0, cfg.wm_group_sd, (mean.shape[0], 1))
        if sigma > 0 and cfg.wm_noise_family == "student_t":
            noise = sigma * rng.standard_t(cfg.wm_noise_df, mean.shape)
        else:
            noise = rng.normal(0.0, sigma, mean.shape) if sigma > 0 else 0.0
        return np.clip(mean + noise, 0.0, 1.0)
