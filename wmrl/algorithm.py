"""The pure algorithm layer of WMRL (paper §3), shared by every trainer.

One step, top to bottom:
  1. ``anchor_mask``: which of the m groups are really executed (anchor groups G_E);
  2. ``training_scores``: the score each trajectory trains on (true r on G_E; r_hat, or f_hat(r_hat)
     when debiasing, on the world-model groups G_WM);
  3. ``group_advantages``: A_i = r_i - mean_j r_j within each group (Eq. 1/2, no std division);
  4. ``group_weights``: the per-group loss weights of the fused gradient
     g = (rho g_E + g_WM) / (rho |G_E| + |G_WM|) (Eq. 5, implementation form); they sum to one.
The per-trajectory loss is then  -sum_k w_k (1/n) sum_i A_ki log pi(tau_ki).

Variants differ only in which groups are executed and trained on, and which correction is on.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from wmrl.anchor_rule import ANCHOR_RULES, FLAT_RESPONSES, WORLD_MODEL_FROM, fixed_groups
from wmrl.config_checks import ConfigError, Section, choice, in_range


@dataclass(frozen=True)
class Variant:
    name: str
    all_anchor: bool  # grpo_real: every group is an anchor group (really executed)
    trains_on_wm: bool  # world-model groups contribute to the gradient (False for grpo_real / grpo_anchor_only)
    needs_anchors: bool  # anchor groups are executed (False only for pure_wm)
    debias: bool  # world-model scores go through f_hat (Eq. 4)
    denoise: bool  # anchor groups weighted by rho (Eq. 5); otherwise rho = 1


# fmt: off
#                 name                all_anchor trains_on_wm needs_anchors debias denoise
_TABLE = [
    Variant("grpo_real",          True,        False,       True,         False, False),  # all executed (reference)
    Variant("grpo_anchor_only",   False,       False,       True,         False, False),  # anchors only
    Variant("pure_wm",            False,       True,        False,        False, False),  # raw world model
    Variant("mixture",            False,       True,        True,         False, False),  # no correction
    Variant("debias_only",        False,       True,        True,         True,  False),  # f_hat, rho = 1
    Variant("denoise_only",       False,       True,        True,         False, True),   # rho, raw r_hat
    Variant("wmrl",               False,       True,        True,         True,  True),   # both
]
# fmt: on
_VARIANTS: dict[str, Variant] = {v.name: v for v in _TABLE}
VARIANTS: tuple[str, ...] = tuple(_VARIANTS)
# The variants whose anchor groups are drawn each step by anchor_frac (grpo_real executes every group,
# pure_wm none): they need at least one anchor group per step (paper §3.3).
ANCHORED_VARIANTS: tuple[str, ...] = tuple(v.name for v in _TABLE if v.needs_anchors and not v.all_anchor)


def get_variant(name: str) -> Variant:
    try:
        return _VARIANTS[name]
    except KeyError:
        raise ValueError(
            f"unknown variant {name!r}; choose one of: {', '.join(VARIANTS)}"
        ) from None


# --------------------------------------------------------------------------- the algorithm section of a run's config


@dataclass
class AlgorithmConfig(Section):
    """WMRL and its ablations (paper §3, constants from Appendix D)."""

    KEY: ClassVar[str] = "algorithm"
    variant: str = field(default="wmrl", metadata=choice(VARIANTS))
    # Fraction of the m groups per step that are anchor groups (really executed).
    anchor_frac: float = field(default=0.1, metadata=in_range(0.0, 1.0, low_open=True))
    # At least this many anchor groups every step (Appendix D: "at least one group").
    min_anchor_groups: int = field(default=1, metadata=in_range(0))
    # How many anchor groups each step: fixed (round(anchor_frac * m), the paper) or adaptive (from the
    # calibration's state, between min_anchor_groups and m; wmrl/anchor_rule.py, docs/calibration.md).
    anchor_rule: str = field(default="fixed", metadata=choice(ANCHOR_RULES))
    # 0: the adaptive rule draws whole groups every step (ceil of its variance bound). G >= 1: its rate
    # form: the bound as a rate (groups per step, fractions too), realised over steps by a carry, at
    # least one anchor group in every G consecutive steps (with min_anchor_groups 0: steps without any).
    anchor_max_gap: int = field(default=0, metadata=in_range(0))
    # Once the audit warns that the world model cannot rank (flat_top: flat at the top; monotonicity: a
    # band ordered backwards): warn only; shift (rho = w_max: the anchor stream weighs most);
    # anchors_only (the step turns grpo_anchor_only).
    on_flat_world_model: str = field(default="warn", metadata=choice(FLAT_RESPONSES))
    # When the world-model stream starts to train: at the first step (start, the paper), or once an audit
    # of the anchor pairs has run flat_top and monotonicity and neither flagged (audit); until then each
    # step is grpo_anchor_only's, and the world model only scores the anchors' solutions (the pairs).
    world_model_from: str = field(default="start", metadata=choice(WORLD_MODEL_FROM))
    # Debiaser is the identity until this many pairs; first fit happens here.
    min_pairs: int = field(default=200, metadata=in_range(1))
    # Refit after every this many new pairs.
    refit_every: int = field(default=64, metadata=in_range(1))
    # eta^2 is measured on the most recent this-many anchor pairs (Appendix D, "recent window"; it needs
    # two residuals at least).
    eta_window: int = field(default=128, metadata=in_range(2))
    # Anchor weight rho is clipped to [1, w_max].
    w_max: float = field(default=4.0, metadata=in_range(1.0))
    groups_per_step: int = field(default=8, metadata=in_range(1))  # m
    # n; GRPO needs two trajectories per group at least for a non-trivial advantage
    group_size: int = field(default=8, metadata=in_range(2))
    seed: int = 0

    def check_together(self, prefix: str) -> None:
        if self.anchor_max_gap and self.anchor_rule != "adaptive":
            raise ConfigError(
                f"{prefix}.anchor_max_gap={self.anchor_max_gap} is not allowed with "
                f"{prefix}.anchor_rule={self.anchor_rule!r}: the gap bounds the adaptive rule's rate form; "
                f"allowed: 0 with anchor_rule 'fixed', any integer >= 0 with anchor_rule 'adaptive'"
            )
        rate_form = self.anchor_rule == "adaptive" and self.anchor_max_gap >= 1
        if self.variant in ANCHORED_VARIANTS and self.min_anchor_groups < 1 and not rate_form:
            raise ConfigError(
                f"{prefix}.min_anchor_groups={self.min_anchor_groups} is not allowed with "
                f"{prefix}.variant={self.variant!r}: it needs at least one anchor group every step "
                "(paper §3.3), else a step with round(anchor_frac * groups_per_step) = 0 trains on the "
                f"world model alone; allowed: >= 1, or 0 with {prefix}.anchor_rule=adaptive and "
                f"{prefix}.anchor_max_gap >= 1 (at least one anchor group in every anchor_max_gap steps)"
            )
        if self.variant in ANCHORED_VARIANTS and self.min_anchor_groups < 1 \
                and fixed_groups(self.groups_per_step, self.anchor_frac, 0) < 1:
            raise ConfigError(
                f"{prefix}.min_anchor_groups=0 with {prefix}.anchor_frac={self.anchor_frac:g} and "
                f"{prefix}.groups_per_step={self.groups_per_step}: round(anchor_frac * groups_per_step) = 0, "
                "so warm-up (and grpo_anchor_only) would draw no anchor group; allowed: min_anchor_groups >= 1, "
                "or an anchor_frac with round(anchor_frac * groups_per_step) >= 1"
            )
        if self.min_anchor_groups > self.groups_per_step:
            raise ConfigError(
                f"{prefix}.min_anchor_groups={self.min_anchor_groups} exceeds "
                f"{prefix}.groups_per_step={self.groups_per_step}"
            )


# --------------------------------------------------------------------------- 1. which groups execute


# round(anchor_frac * m) within [min_anchor_groups, m]: the fixed rule (wmrl/anchor_rule.py)
n_anchor_groups = fixed_groups


def choose_anchor_groups(
    m: int, anchor_frac: float, min_anchor_groups: int, rng: np.random.Generator
) -> np.ndarray:
    """Boolean mask (m,) with ``n_anchor_groups(...)`` groups chosen uniformly at random."""
    return _random_mask(m, n_anchor_groups(m, anchor_frac, min_anchor_groups), rng)


def _random_mask(m: int, k: int, rng: np.random.Generator) -> np.ndarray:
    mask = np.zeros(m, dtype=bool)
    mask[rng.choice(m, size=k, replace=False)] = True
    return mask


def anchor_mask(
    variant: Variant, m: int, anchor_frac: float, min_anchor_groups: int, rng: np.random.Generator,
    n_anchor: int | None = None,
) -> np.ndarray:
    """The groups a variant really executes this step: all (grpo_real), none (pure_wm) or the anchors;
    ``n_anchor``: how many anchors (the adaptive rule's count), else round(anchor_frac * m)."""
    if variant.all_anchor:
        return np.ones(m, dtype=bool)
    if not variant.needs_anchors:
        return np.zeros(m, dtype=bool)
    if n_anchor is None:
        return choose_anchor_groups(m, anchor_frac, min_anchor_groups, rng)
    if not min_anchor_groups <= n_anchor <= m:
        raise ValueError(f"n_anchor={n_anchor} must lie in [min_anchor_groups={min_anchor_groups}, m={m}]")
    return _random_mask(m, n_anchor, rng)  # the draw choose_anchor_groups makes for the same count


# --------------------------------------------------------------------------- 2-3. scores and advantages


def check_groups(name: str, scores: np.ndarray) -> np.ndarray:
    """(G, n) float scores in [0, 1], G >= 1 groups of n >= 2 trajectories; clear errors otherwise."""
    x = np.asarray(scores, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array (groups, trajectories); got shape {x.shape}")
    if x.shape[0] == 0:
        raise ValueError(f"{name} holds no groups (shape {x.shape})")
    if x.shape[1] == 0:
        raise ValueError(
            f"{name}: the groups are empty (shape {x.shape}); GRPO needs n >= 2 trajectories per group"
        )
    if x.shape[1] == 1:
        raise ValueError(
            f"{name}: groups of size 1 (shape {x.shape}); GRPO needs n >= 2 trajectories per group, "
            "a single trajectory has advantage 0"
        )
    bad = ~((x >= 0.0) & (x <= 1.0))
    if bad.any():
        g, i = np.argwhere(bad)[0]
        raise ValueError(
            f"{name}[{g}, {i}] = {float(x[g, i])!r} is NaN or outside [0, 1]; scores must lie in [0, 1]"
        )
    return x


def group_advantages(scores: np.ndarray) -> np.ndarray:
    """Eq. 1/2: A_i = r_i - (1/n) sum_j r_j within each group (no std division)."""
    x = check_groups("scores", scores)
    return x - x.mean(axis=1, keepdims=True)


def training_scores(
    variant: Variant,
    predicted: np.ndarray,
    true: np.ndarray,
    anchor: np.ndarray,
    calibrate: Callable[[np.ndarray], np.ndarray],
) -> np.ndarray:
    """(m, n) scores to train on: true r on anchor groups, r_hat or f_hat(r_hat) (Eq. 4) elsewhere.

    ``true`` is only read on anchor groups (other rows may hold NaN); ``predicted`` only elsewhere.
    """
    anchor = np.asarray(anchor, dtype=bool)
    out = np.empty(np.shape(predicted), dtype=np.float64)
    if anchor.any():
        out[anchor] = check_groups("true scores of anchor groups", np.asarray(true)[anchor])
    wm = ~anchor
    if wm.any():
        r_hat = check_groups("world-model scores", np.asarray(predicted)[wm])
        out[wm] = calibrate(r_hat) if variant.debias else r_hat
    return out


# --------------------------------------------------------------------------- 4. fused-gradient weights


def stream_weights(rho: float, n_anchor_groups: int, n_wm_groups: int) -> tuple[float, float]:
    """Eq. 5 implementation form: (rho/(rho|G_E|+|G_WM|), 1/(rho|G_E|+|G_WM|)), per group."""
    if not (math.isfinite(rho) and rho >= 1.0):
        raise ValueError(f"rho={rho!r} must be a finite number >= 1")
    if n_anchor_groups < 0 or n_wm_groups < 0 or n_anchor_groups + n_wm_groups == 0:
        raise ValueError(
            f"group counts |G_E|={n_anchor_groups}, |G_WM|={n_wm_groups} must be >= 0 with at least one group"
        )
    denom = rho * n_anchor_groups + n_wm_groups
    return rho / denom, 1.0 / denom


def group_weights(variant: Variant, rho: float, anchor: np.ndarray) -> np.ndarray:
    """Per-group loss weights (m,) of one step; they sum to one.

    Groups a variant does not train on (world-model groups of grpo_real/grpo_anchor_only) get 0;
    rho is used only by the denoising variants (else 1, i.e. equal weights 1/#trained groups).
    """
    anchor = np.asarray(anchor, dtype=bool)
    if anchor.ndim != 1 or anchor.size == 0:
        raise ValueError(
            f"anchor must be a non-empty 1-D mask of groups; got shape {anchor.shape}"
        )
    n_e = int(anchor.sum())
    n_wm = int(anchor.size - n_e) if variant.trains_on_wm else 0
    if n_e + n_wm == 0:
        raise ValueError(
            f"variant {variant.name!r} trains on anchor groups only, but none was drawn this step"
        )
    w_e, w_wm = stream_weights(rho if variant.denoise else 1.0, n_e, n_wm)
    return np.where(anchor, w_e, w_wm if variant.trains_on_wm else 0.0)
