"""How many of the m groups are anchor groups next step: ``algorithm.anchor_rule`` (issue 37).

``fixed`` (the paper, the default): round(anchor_frac * m), at least ``min_anchor_groups``.

``adaptive``: a pure function of the calibration's state (:class:`RuleInputs`, read off the
:class:`~wmrl.calibration.calibrator.Calibrator`), derived from the variance of the fused gradient
(Eq. 5, Lemma 12). With per-group variances V_E (anchor) and V_WM = rho V_E (world model, rho = 1 +
c sigma^2, estimated as 1 + eta2/eta2_cal), k anchor groups of m and inverse-variance weights,

    Var(g) = rho V_E / (m + (rho - 1) k).

The fixed rule's k0 = round(anchor_frac * m) at the noise measured at the end of warm-up (eta2 =
eta2_cal, rho = 2) sets the variance the run was configured for: V* = 2 V_E / (m + k0). The adaptive
rule takes the fewest anchor groups that keep Var(g) <= V*:

    k = ceil( ((rho / 2)(m + k0) - m) / (rho - 1) ),   clipped to [min_anchor_groups, m].

So k < k0 while the corrected world model is more precise than at warm-up (eta2 < eta2_cal; at rho = 1
any k gives V_E / m, and k = min_anchor_groups), k = k0 at the warm-up noise, and k grows as eta2
rises. The variance argument holds only while f_hat(r_hat) is an unbiased stand-in for r (Assumption 6;
Theorem 4's contraction needs Delta_phi > 0 and q > 0), so:

- an audit check that flags a broken assumption (monotonicity, stationarity, task bias, a world model
  flat at the top): eta2 no longer measures the world-model stream's error; rho is taken at the
  largest value the fusion admits, ``w_max``;
- the coverage check flags (a level, the top scores GRPO chases, starved of anchor pairs: q -> 0 in
  Eq. 6's c_f = (2 Delta_l / Delta_phi) sqrt(1 / (2 q a))): one more anchor group than the variance
  asks for, so that pairs arrive at that level;
- before eta2_cal exists (warm-up): k0, the fixed rule.
See docs/calibration.md ("The anchor rule") for the derivation and its limits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

ANCHOR_RULES: tuple[str, ...] = ("fixed", "adaptive")
# What a run does once the audit's flat_top check warns (the world model cannot rank at the top).
FLAT_RESPONSES: tuple[str, ...] = ("warn", "shift", "anchors_only")
# Audit checks whose flag means eta2 no longer measures the world-model stream's error.
ASSUMPTION_CHECKS: tuple[str, ...] = ("monotonicity", "stationarity", "task_bias", "flat_top")
# The reason's category, logged as the number ``anchor/reason`` (MLflow metrics are numbers): its index.
REASONS: tuple[str, ...] = ("fixed", "warm-up", "variance", "audit", "starved", "anchors_only")


@dataclass(frozen=True)
class RuleInputs:
    """The calibration's state the rule reads (all of it restored exactly by ``Calibrator.load``)."""

    warmed_up: bool
    eta2: float | None  # the recent window's normalised residual (None before warm-up)
    eta2_cal: float | None  # its value at the end of warm-up
    flagged: tuple[str, ...] = ()  # audit checks that flagged at the latest audit


@dataclass(frozen=True)
class AnchorDecision:
    groups: int  # anchor groups next step
    reason: str  # one of REASONS
    detail: str  # a sentence for the log and `wmrl status`

    def frac(self, m: int) -> float:
        return self.groups / m


def fixed_groups(m: int, anchor_frac: float, min_anchor_groups: int) -> int:
    """round(anchor_frac * m), at least ``min_anchor_groups``, at most m (half rounds up)."""
    if m < 1:
        raise ValueError(f"m={m}: a step needs at least one group")
    if not 0.0 < anchor_frac <= 1.0:
        raise ValueError(f"anchor_frac={anchor_frac} must lie in (0, 1]")
    if not 0 <= min_anchor_groups <= m:
        raise ValueError(f"min_anchor_groups={min_anchor_groups} must lie in [0, m={m}]")
    # +1e-9 so that 0.3 * 10 = 3.0000000000000004 or 2.9999999999999996 both give 3
    return min(m, max(min_anchor_groups, math.floor(anchor_frac * m + 0.5 + 1e-9)))


def variance_groups(rho: float, m: int, k0: int) -> int:
    """The fewest anchor groups k in [0, m] with rho / (m + (rho - 1) k) <= 2 / (m + k0) (module doc)."""
    if not (math.isfinite(rho) and rho >= 1.0):
        raise ValueError(f"rho={rho!r} must be a finite number >= 1")
    if rho - 1.0 < 1e-12:
        return 0  # a noise-free world model: the variance does not depend on k
    need = ((rho / 2.0) * (m + k0) - m) / (rho - 1.0)
    return min(m, max(0, math.ceil(need - 1e-9)))  # -1e-9: rho = 2 gives exactly k0


def decide(
    rule: str, m: int, anchor_frac: float, min_anchor_groups: int, w_max: float, state: RuleInputs | None
) -> AnchorDecision:
    """The number of anchor groups for the next step and why; ``state=None``: no calibration (fixed)."""
    if rule not in ANCHOR_RULES:
        raise ValueError(f"anchor_rule={rule!r}; choose one of: {', '.join(ANCHOR_RULES)}")
    k0 = fixed_groups(m, anchor_frac, min_anchor_groups)
    if rule == "fixed" or state is None:
        return AnchorDecision(k0, "fixed", f"{k0} of {m} groups (anchor_frac {anchor_frac:g})")
    if not state.warmed_up or state.eta2 is None or not state.eta2_cal:
        return AnchorDecision(k0, "warm-up", f"{k0} of {m} groups until eta2_cal is measured")
    broken = [c for c in ASSUMPTION_CHECKS if c in state.flagged]
    if broken:
        rho, reason = w_max, "audit"
        detail = f"audit flagged {', '.join(broken)}: rho taken at w_max = {w_max:g}"
    else:
        rho, reason = 1.0 + state.eta2 / state.eta2_cal, "variance"
        detail = f"eta2/eta2_cal = {state.eta2 / state.eta2_cal:.2f}: rho {rho:.2f}"
    k = max(min_anchor_groups, variance_groups(rho, m, k0))
    if "coverage" in state.flagged:  # one more than the floor too: the floor alone starved that level
        k, reason = k + 1, "starved"
        detail += "; the top scores are starved of anchor pairs: one more group"
    k = min(m, k)
    return AnchorDecision(k, reason, f"{k} of {m} groups ({detail})")
