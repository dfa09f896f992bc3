"""Synthetic world model: ``r_hat = clip(phi(r) + N(0, sigma^2), 0, 1)`` (paper §3.3: bias + noise).

The distortions ``phi`` (``simulator.phi``, strength ``simulator.phi_param``):

- ``identity``: an unbiased world model.
- ``power``: ``r ** a``; ``a < 1`` is *overconfident* (concave: any solution that runs looks good).
- ``logistic``: a sigmoid of slope ``k`` centred at 0.5, rescaled to map 0 -> 0 and 1 -> 1
  (over-separates the middle, squashes both ends).
- ``bump``: ``r + h * exp(-((r - 0.35) / 0.08)^2 / 2)``: over-rates a band of mediocre solutions
  (non-monotone: a 0.35 solution looks better than a 0.6 one).
- ``inverted``: reverses the order of true scores inside ``[0.5 - w/2, 0.5 + w/2]`` (non-monotone).
- ``noise``: ``r_hat`` is drawn uniformly, independent of ``r`` (the world model knows nothing).

Drift (``drift_step``) switches ``phi`` to ``drift_phi``; degradation (``degrade_step``) raises the
noise to ``degrade_noise``. Both model a world model that stops matching the policy's solutions.
"""

from __future__ import annotations

import numpy as np

from wmrl.simulate.config import SimulatorConfig

BUMP_CENTRE, BUMP_WIDTH = 0.35, 0.08


def _sigmoid(x: np.ndarray | float) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.asarray(x, dtype=float)))


def apply_phi(name: str, param: float, r: np.ndarray, rng: np.random.Generator | None = None) -> np.ndarray:
    """``phi(r)`` before noise and clipping. ``noise`` needs ``rng`` (its output ignores ``r``)."""
    r = np.asarray(r, dtype=float)
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
    raise ValueError(f"unknown phi {name!r}")


class SyntheticWorldModel:
    """Scores true outcomes the way a biased, noisy world model would; the phase depends on the step."""

    def __init__(self, cfg: SimulatorConfig) -> None:
        self.cfg = cfg

    def phi_at(self, step: int) -> tuple[str, float]:
        cfg = self.cfg
        if cfg.drift_step is not None and step >= cfg.drift_step:
            return cfg.drift_phi, cfg.drift_param
        return cfg.phi, cfg.phi_param

    def noise_at(self, step: int) -> float:
        cfg = self.cfg
        if cfg.degrade_step is not None and step >= cfg.degrade_step:
            return cfg.degrade_noise
        return cfg.wm_noise

    def mean_curve(self, r: np.ndarray, step: int) -> np.ndarray:
        """``phi(r)`` clipped to [0,1] at ``step`` (for plots; NaN for the uninformative ``noise``)."""
        name, param = self.phi_at(step)
        if name == "noise":
            return np.full(np.shape(r), np.nan)
        return np.clip(apply_phi(name, param, r), 0.0, 1.0)

    def predict(self, true: np.ndarray, step: int, rng: np.random.Generator) -> np.ndarray:
        """World-model scores ``r_hat`` in [0,1] for solutions of true score ``true`` at ``step``."""
        name, param = self.phi_at(step)
        sigma = self.noise_at(step)
        mean = apply_phi(name, param, true, rng)
        noise = rng.normal(0.0, sigma, mean.shape) if sigma > 0 else 0.0
        return np.clip(mean + noise, 0.0, 1.0)
