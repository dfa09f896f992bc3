"""How many of the m groups are anchor groups next step: ``algorithm.anchor_rule`` (issue 37).

``fixed`` (the paper, the default): round(anchor_frac * m), at least ``min_anchor_groups``.

``adaptive``: a pure function of the calibration's state (:class:`RuleInputs`, read off the
:class:`~wmrl.calibration.calibrator.Calibrator`), derived from the variance of the fused gradient
(Eq. 5, Lemma 12). With per-group variances V_E (anchor) and V_WM = rho V_E (world model, rho = 1 +
c sigma^2, estimated as 1 + eta2/eta2_cal), k anchor groups of m and inverse-variance weights,

    Var(g) = rho V_E / (m + (rho - 1) k).

The fixed rule's k0 = round(anchor_frac * m) at the noise measured at the end of warm-up (eta2 =
eta2_cal, rho = 2) sets the variance the run was configured for: V* = 2 V_E / (m + k0). Var(g) <= V*
holds for every k at or above

    k*(rho) = ((rho / 2)(m + k0) - m) / (rho - 1)        (0 when this is negative, m at most).

The adaptive rule takes ceil(k*), clipped to [min_anchor_groups, m]: the fewest whole groups that keep
Var(g) <= V* at every step. So k < k0 while the corrected world model is more precise than at warm-up
(eta2 < eta2_cal; at rho = 1 any k gives V_E / m, and k = min_anchor_groups), k = k0 at the warm-up
noise, and k grows as eta2 rises. The variance argument holds only while f_hat(r_hat) is an unbiased
stand-in for r (Assumption 6; Theorem 4's contraction needs Delta_phi > 0 and q > 0), so:

- an audit check that flags a broken assumption (monotonicity, stationarity, task bias, a world model
  flat at the top): eta2 no longer measures the world-model stream's error; rho is taken at the
  largest value the fusion admits, ``w_max``;
- the coverage check flags (a level, the top scores GRPO chases, starved of anchor pairs: q -> 0 in
  Eq. 6's c_f = (2 Delta_l / Delta_phi) sqrt(1 / (2 q a))): one more anchor group than the variance
  asks for, so that pairs arrive at that level;
- before eta2_cal exists (warm-up): k0, the fixed rule.

**The rate form** (``algorithm.anchor_max_gap`` = G >= 1; 0, the default, is the whole-group form
above). k* is a real number, and below one group the whole-group form cannot follow it: with m = 8 and
anchor_frac 0.1, k0 = 1 = min_anchor_groups, so ceil(k*) can only stay at or above k0 whatever the
world model's precision. The rate form keeps k* itself as a *rate* (anchor groups per step), and
realises it over steps with a deterministic carry (first-order sigma-delta):

    owed_t = carry_{t-1} + rate_t,   k_t = floor(owed_t),   carry_t = owed_t - k_t  in [0, 1),

so sum_t k_t lies within one group of sum_t rate_t (the running mean matches the rate), and each step's
k_t is floor(rate_t) or ceil(rate_t). What the variance bound holds at is then the mean over steps: the
gradient of each step with k_t < k* is noisier than V*, of one with k_t > k* less noisy, and the mean
count is k* (Var is convex in k, so the mean variance sits slightly above V*; at k* < 1 the steps
without an anchor group have Var = rho V_E / m, at most 1 + k0 / m times V*, since rho < 2 there).

What the variance argument does not give is the calibration's own upkeep: f_hat, eta2 and the audit
only move when pairs arrive, and at rho -> 1 the bound asks for no anchors at all (k* = 0: the
gradient's variance does not depend on k). Theorem 4 needs q > 0, a share of fresh pairs at every level,
and Assumption 6 (stationarity) can only be checked against new pairs. So the rate is floored at
max(min_anchor_groups, 1/G): at least one anchor group in every G consecutive steps (after a step with
anchors the carry is below 1 and grows by at least 1/G a step). ``min_anchor_groups: 0`` is allowed for
an anchored variant only in the rate form (the guarantee is then G's); warm-up draws k0 every step
(at least one group), as does the ``anchors_only`` response. The carry is part of the calibrator's
saved state (``Calibrator.load`` restores it), so a resumed run plans the same counts.
See docs/calibration.md ("The anchor rule") for the derivation and its limits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

ANCHOR_RULES: tuple[str, ...] = ("fixed", "adaptive")
# What a run does once the audit warns that the world model cannot rank (``algorithm.on_flat_world_model``).
FLAT_RESPONSES: tuple[str, ...] = ("warn", "shift", "anchors_only")
# The checks whose warning says so. Theorem 4's contraction needs Delta_phi > 0 at every level: flat_top
# finds Delta_phi -> 0 at the top; a monotonicity warning finds Delta_phi < 0 somewhere, a world model that
# orders part of the range backwards, which no monotone f_hat undoes and more anchors only dilute (the
# variance bound at rho = w_max asks for (m + 2 k0) / 3 groups at w_max = 4 and leaves the stream's bias).
CANNOT_RANK_CHECKS: tuple[str, ...] = ("flat_top", "monotonicity")
# When the world-model stream starts to train (``algorithm.world_model_from``): at the first step (the
# paper: raw r_hat until min_pairs, then f_hat), or once an audit has run both CANNOT_RANK_CHECKS on the
# anchor pairs and neither flagged. Until then the step is grpo_anchor_only's (only anchor groups rolled
# out) with the world model scoring the anchors' solutions, so the pairs and the audit build up at the
# anchor-only run's cost plus those calls: a world model that cannot rank costs almost nothing to find out.
WORLD_MODEL_FROM: tuple[str, ...] = ("start", "audit")
# Audit checks whose flag means eta2 no longer measures the world-model stream's error.
ASSUMPTION_CHECKS: tuple[str, ...] = ("monotonicity", "stationarity", "task_bias", "flat_top")
# The reason's category, logged as the number ``anchor/reason`` (MLflow metrics are numbers): its index.
# ``max_gap``: the rate form's floor 1/anchor_max_gap decided (the variance asked for less); ``gated``: no
# audit has cleared the world model yet (``world_model_from: audit``). New reasons go last: the index is logged.
REASONS: tuple[str, ...] = ("fixed", "warm-up", "variance", "audit", "starved", "anchors_only", "max_gap", "gated")


@dataclass(frozen=True)
class RuleInputs:
    """The calibration's state the rule reads (all of it restored exactly by ``Calibrator.load``)."""

    warmed_up: bool
    eta2: float | None  # the recent window's normalised residual (None before warm-up)
    eta2_cal: float | None  # its value at the end of warm-up
    flagged: tuple[str, ...] = ()  # audit checks that flagged at the latest audit
    carry: float = 0.0  # the rate form's carry in [0, 1): the part of a group owed by earlier steps


@dataclass(frozen=True)
class AnchorDecision:
    groups: int  # anchor groups next step
    reason: str  # one of REASONS
    detail: str  # a sentence for the log and `wmrl status`
    rate: float | None = None  # the rate form's anchor groups per step (None in the whole-group form)
    carry: float = 0.0  # the rate form's carry once this step drew ``groups`` (what the next step reads)

    def frac(self, m: int) -> float:
        return self.groups / m


def clears_world_model(checked: Sequence[str], flags: Sequence[str]) -> bool:
    """Whether an audit lets the world-model stream start (``world_model_from: audit``): it ran every
    check of CANNOT_RANK_CHECKS (none skipped for want of pairs) and none of them flagged."""
    return all(c in checked and c not in flags for c in CANNOT_RANK_CHECKS)


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


def variance_rate(rho: float, m: int, k0: int) -> float:
    """k*(rho) in [0, m]: the real k with rho / (m + (rho - 1) k) = 2 / (m + k0) (module doc)."""
    if not (math.isfinite(rho) and rho >= 1.0):
        raise ValueError(f"rho={rho!r} must be a finite number >= 1")
    if rho - 1.0 < 1e-12:
        return 0.0  # a noise-free world model: the variance does not depend on k
    return min(float(m), max(0.0, ((rho / 2.0) * (m + k0) - m) / (rho - 1.0)))


def variance_groups(rho: float, m: int, k0: int) -> int:
    """The fewest anchor groups k in [0, m] with rho / (m + (rho - 1) k) <= 2 / (m + k0) (module doc)."""
    return math.ceil(variance_rate(rho, m, k0) - 1e-9)  # -1e-9: rho = 2 gives exactly k0


def carried(rate: float, carry: float) -> tuple[int, float]:
    """This step's whole groups and the carry after it: floor(carry + rate), and what is left in [0, 1)."""
    owed = carry + rate
    k = math.floor(owed + 1e-9)  # +1e-9: 1/7 added seven times owes one group, not 0.9999999999999998
    return k, max(0.0, owed - k)


def decide(
    rule: str, m: int, anchor_frac: float, min_anchor_groups: int, w_max: float, state: RuleInputs | None,
    max_gap: int = 0,
) -> AnchorDecision:
    """The number of anchor groups for the next step and why; ``state=None``: no calibration (fixed).
    ``max_gap`` >= 1: the rate form (module doc), at least one anchor group in every ``max_gap`` steps."""
    if rule not in ANCHOR_RULES:
        raise ValueError(f"anchor_rule={rule!r}; choose one of: {', '.join(ANCHOR_RULES)}")
    if max_gap < 0:
        raise ValueError(f"anchor_max_gap={max_gap} must be >= 0 (0: the whole-group form)")
    if rule == "fixed" or state is None:
        k0 = fixed_groups(m, anchor_frac, min_anchor_groups)
        return AnchorDecision(k0, "fixed", f"{k0} of {m} groups (anchor_frac {anchor_frac:g})")
    if max_gap:
        return _decide_rate(m, anchor_frac, min_anchor_groups, w_max, state, max_gap)
    k0 = fixed_groups(m, anchor_frac, min_anchor_groups)
    if not state.warmed_up or state.eta2 is None or not state.eta2_cal:
        return AnchorDecision(k0, "warm-up", f"{k0} of {m} groups until eta2_cal is measured")
    rho, reason, detail = _noise(state.flagged, state.eta2, state.eta2_cal, w_max)
    k = max(min_anchor_groups, variance_groups(rho, m, k0))
    if "coverage" in state.flagged:  # one more than the floor too: the floor alone starved that level
        k, reason = k + 1, "starved"
        detail += "; the top scores are starved of anchor pairs: one more group"
    k = min(m, k)
    return AnchorDecision(k, reason, f"{k} of {m} groups ({detail})")


def _noise(flagged: tuple[str, ...], eta2: float, eta2_cal: float, w_max: float) -> tuple[float, str, str]:
    """rho for the variance bound, the reason and its sentence: w_max once the audit flags Assumption 6."""
    broken = [c for c in ASSUMPTION_CHECKS if c in flagged]
    if broken:
        return w_max, "audit", f"audit flagged {', '.join(broken)}: rho taken at w_max = {w_max:g}"
    return 1.0 + eta2 / eta2_cal, "variance", f"eta2/eta2_cal = {eta2 / eta2_cal:.2f}: rho {1.0 + eta2 / eta2_cal:.2f}"


def _decide_rate(
    m: int, anchor_frac: float, min_anchor_groups: int, w_max: float, state: RuleInputs, max_gap: int
) -> AnchorDecision:
    """The rate form: k* as a rate, floored at max(min_anchor_groups, 1/max_gap), realised by the carry."""
    k0 = fixed_groups(m, anchor_frac, max(1, min_anchor_groups))  # warm-up always draws a group at least
    if not state.warmed_up or state.eta2 is None or not state.eta2_cal:
        return AnchorDecision(k0, "warm-up", f"{k0} of {m} groups until eta2_cal is measured",
                              rate=float(k0), carry=state.carry)
    rho, reason, detail = _noise(state.flagged, state.eta2, state.eta2_cal, w_max)
    need = variance_rate(rho, m, k0)
    floor = max(float(min_anchor_groups), 1.0 / max_gap)
    if need < floor:
        need = floor
        if floor > min_anchor_groups:
            reason, detail = "max_gap", f"{detail}; the variance asks for less than one group in {max_gap} steps"
    if "coverage" in state.flagged:
        need, reason = need + 1.0, "starved"
        detail += "; the top scores are starved of anchor pairs: one more group per step"
    rate = min(float(m), need)
    k, carry = carried(rate, state.carry)
    return AnchorDecision(k, reason, f"{k} of {m} groups (rate {rate:.2f} per step, carry {carry:.2f}; {detail})",
                          rate=rate, carry=carry)
