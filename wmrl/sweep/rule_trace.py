"""What the anchor rule saw and chose at every step of a run, and how a simulated run's choices compare
(``wmrl simulate --from-run``, issue 37 item 4).

Where a run directory keeps it (docs/run-directory.md), and how reliably:

- ``metrics.jsonl`` (the anchored and LLM trainers): the row numbered s + 1 (the coordinator numbers rows
  by steps done) holds step s's decision as the run took it: ``anchor/frac`` (k / m) and
  ``anchor/reason`` (the index in :data:`~wmrl.anchor_rule.REASONS`). The decisions are read from here.
- ``calibration/pairs.jsonl`` replayed through the run's own loop shell, in memory: the calibrator is a
  deterministic function of its pairs, so the replay restores the rule's inputs before every step
  (warm-up, eta2, eta2_cal, the checks the latest audit flagged) as the run had them, and
  ``LoopShell.plan`` decides as the run did. One input is not in the log: the coverage check reads the
  world-model scores the policy chased, which no file keeps; the replay's audit puts the pool's recent
  r_hat in their place (as the audit does without them), so its coverage flag and its ``starved``
  decisions are approximate. ``replay_agreement`` (the share of steps where the replay decides the
  logged count and reason) says how far that matters for a given run.

A run without ``anchor/frac`` in its metrics (a ``wmrl simulate`` run directory, a run from before the
rule) gets the replay's decisions.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from wmrl.algorithm import AlgorithmConfig
from wmrl.anchor_rule import REASONS
from wmrl.calibration.pool import AnchorPair, read_log
from wmrl.config import WMRLConfig
from wmrl.loop import LoopShell
from wmrl.simulate.sweep import run_jobs

# Settings of the rule (algorithm.*) that a fitted simulator carries over from the run.
RULE_SETTINGS: tuple[str, ...] = ("anchor_rule", "anchor_frac", "min_anchor_groups", "anchor_max_gap",
                                 "on_flat_world_model", "world_model_from", "w_max")


@dataclass(frozen=True)
class RuleStep:
    """One step: the anchor groups chosen and why, and the calibration's state the choice read."""

    step: int  # 0-based, as the pair log numbers steps
    groups: int
    reason: str  # one of REASONS
    eta2: float | None
    eta2_cal: float | None
    flagged: tuple[str, ...] = ()  # audit checks flagged at the latest audit before the step

    @property
    def ratio(self) -> float | None:
        """eta2 / eta2_cal (rho = 1 + this in the rule), None before warm-up."""
        if self.eta2 is None or not self.eta2_cal or not math.isfinite(self.eta2):
            return None
        return self.eta2 / self.eta2_cal


@dataclass
class RuleTrace:
    source: str  # which file gave the decisions, which the inputs
    groups_per_step: int
    steps: list[RuleStep]
    replay_agreement: float | None = None  # share of steps where the replay decides the logged (k, reason)

    def first_flagged(self) -> dict[str, int]:
        """Each audit check the rule saw flagged, and the first step it did."""
        first: dict[str, int] = {}
        for s in self.steps:
            for check in s.flagged:
                first.setdefault(check, s.step)
        return first

    def reason_counts(self) -> dict[str, int]:
        counts = Counter(s.reason for s in self.steps)
        return {r: counts[r] for r in REASONS if counts[r]}

    def describe(self) -> str:
        """One line for ``Fit.describe``."""
        if not self.steps:
            return "- the rule in the run: no steps recorded"
        k = np.array([s.groups for s in self.steps])
        reasons = ", ".join(f"{r} {n}" for r, n in self.reason_counts().items())
        ratios = ratio_summary(self.steps)
        eta = ("eta2/eta2_cal after warm-up: median {:.2f}, last quarter {:.2f}".format(*ratios)
               if ratios else "never warmed up")
        flags = ", ".join(f"{c} from step {s}" for c, s in sorted(self.first_flagged().items(), key=lambda x: x[1]))
        agree = "" if self.replay_agreement is None else f"; replay agrees with the log at {self.replay_agreement:.0%} of steps"
        return (f"- the rule in the run ({self.source}{agree}): {k.mean():.2f} anchor groups of {self.groups_per_step} "
                f"per step (min {k.min()}, max {k.max()}); reasons: {reasons}; {eta}; "
                f"audit flagged: {flags or 'nothing'}")


def ratio_summary(steps: Sequence[RuleStep]) -> tuple[float, float] | None:
    """(median, median of the last quarter) of eta2/eta2_cal over the steps after warm-up; None if none."""
    ratios = [r for r in (s.ratio for s in steps) if r is not None]
    if not ratios:
        return None
    return float(np.median(ratios)), float(np.median(ratios[len(ratios) * 3 // 4:]))


@contextmanager
def _quiet_audit() -> Iterator[None]:
    """A replay re-runs every audit of the run: its warnings were logged by the run already."""
    logger = logging.getLogger("wmrl.calibration.calibrator")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def replay(alg: AlgorithmConfig, pairs_dir: Path, steps: int) -> list[RuleStep]:
    """The rule's decision and inputs before each of ``steps`` steps, from the pair log (module doc)."""
    batches: dict[int, list[list[AnchorPair]]] = {}
    for step, batch, _ in read_log(pairs_dir):
        batches.setdefault(step, []).append(batch)
    shell = LoopShell(alg, None, durable=False)
    cal = shell.calibrator
    out = []
    with _quiet_audit():
        for step in range(steps):
            _, decision, _ = shell.plan()
            state = None if cal is None else cal.rule_inputs()
            if cal is not None:  # as LoopShell.step does: the rate form's carry moves with each decision
                cal.record_anchor(decision, alg.groups_per_step)
            out.append(RuleStep(step, decision.groups, decision.reason, None if state is None else state.eta2,
                                None if state is None else state.eta2_cal, () if state is None else state.flagged))
            for batch in batches.get(step, []) if cal is not None else []:
                cal.observe(batch, step)
                if cal.audit_due:  # after the step, as LoopShell.step audits
                    cal.audit()
    return out


def logged_decisions(rows: Mapping[int, Mapping[str, Any]], m: int) -> dict[int, tuple[int, str]]:
    """{step: (k, reason)} from metrics rows that carry anchor/frac and anchor/reason (row s + 1 = step s)."""
    out = {}
    for row_step, row in rows.items():
        frac, reason = row.get("anchor/frac"), row.get("anchor/reason")
        if frac is None or reason is None:
            continue
        out[int(row_step) - 1] = (round(float(frac) * m), REASONS[int(reason)])
    return out


def read_trace(alg: AlgorithmConfig, pairs_dir: Path, rows: Mapping[int, Mapping[str, Any]], steps: int) -> RuleTrace:
    """The run's trace: decisions from the metrics rows where they are, inputs from the replay."""
    logged = logged_decisions(rows, alg.groups_per_step)
    n = max(steps, max(logged, default=-1) + 1) if logged else steps
    replayed = replay(alg, pairs_dir, n)
    if not logged:
        return RuleTrace("decisions and inputs: pair-log replay (no anchor/frac in metrics.jsonl)",
                         alg.groups_per_step, replayed)
    merged = [RuleStep(s.step, *logged[s.step], s.eta2, s.eta2_cal, s.flagged) for s in replayed if s.step in logged]
    agree = float(np.mean([(s.groups, s.reason) == logged[s.step] for s in replayed if s.step in logged]))
    return RuleTrace("decisions: metrics.jsonl; inputs: pair-log replay", alg.groups_per_step, merged, agree)


# --------------------------------------------------------------------------- simulated against real


def simulated_trace(history: Mapping[str, Sequence[float]], steps: Sequence[int], m: int) -> list[RuleStep]:
    """A simulated run's decisions, from its history logged every step (``simulator.log_every=1``); the
    inputs of step s are the state logged after step s - 1."""
    if list(steps) != list(range(1, len(steps) + 1)):
        raise ValueError("the simulated run must log every step (simulator.log_every=1) to compare step by step")
    out = []
    for i in range(len(steps)):
        eta2 = history["eta2"][i - 1] if i else float("nan")
        cal = history["eta2_cal"][i - 1] if i else float("nan")
        out.append(RuleStep(i, round(history["anchor_frac"][i] * m), REASONS[int(history["anchor_reason"][i])],
                            None if math.isnan(eta2) else eta2, None if math.isnan(cal) else cal))
    return out


@dataclass
class RuleAgreement:
    """The simulated runs' per-step anchor groups against the real run's, over their common steps."""

    steps: int
    seeds: int
    same_groups: float  # share of (step, seed) with the real run's k
    same_reason: float  # ... with its reason
    within_one: float  # ... with |k_sim - k_real| <= 1
    mean_groups_real: float
    mean_groups_sim: float
    reasons_real: dict[str, float] = field(default_factory=dict)  # share of steps
    reasons_sim: dict[str, float] = field(default_factory=dict)  # share of steps, all seeds
    ratio_real: tuple[float, float] | None = None  # ratio_summary
    ratio_sim: tuple[float, float] | None = None  # the seeds' mean

    def describe(self) -> str:
        def shares(d: Mapping[str, float]) -> str:
            return ", ".join(f"{r} {v:.0%}" for r, v in d.items()) or "-"

        def ratio(r: tuple[float, float] | None) -> str:
            return "-" if r is None else f"{r[0]:.2f} (last quarter {r[1]:.2f})"

        return "\n".join([
            f"## The anchor rule: simulated against the run ({self.seeds} seed(s), its first {self.steps} steps)",
            "",
            (f"- same anchor groups as the run: {self.same_groups:.0%} of steps (within one group: "
             f"{self.within_one:.0%}); mean per step: run {self.mean_groups_real:.2f}, simulated "
             f"{self.mean_groups_sim:.2f}"),
            (f"- same reason: {self.same_reason:.0%} of steps; run: {shares(self.reasons_real)}; "
             f"simulated: {shares(self.reasons_sim)}"),
            f"- eta2/eta2_cal after warm-up, median: run {ratio(self.ratio_real)}, simulated {ratio(self.ratio_sim)}",
        ]) + "\n"


def _shares(steps: Sequence[RuleStep]) -> dict[str, float]:
    counts = Counter(s.reason for s in steps)
    return {r: counts[r] / len(steps) for r in REASONS if counts[r]}


def compare_traces(real: RuleTrace, simulated: Sequence[Sequence[RuleStep]]) -> RuleAgreement:
    """Step by step over the steps both have (``simulated``: one trace per seed)."""
    n = min([len(real.steps), *(len(s) for s in simulated)])
    if n == 0 or not simulated:
        raise ValueError("nothing to compare: the real or a simulated trace has no steps")
    ref = real.steps[:n]
    sims = [list(s[:n]) for s in simulated]
    k_real = np.array([s.groups for s in ref])
    k_sim = np.array([[s.groups for s in sim] for sim in sims])
    same_reason = np.array([[a.reason == b.reason for a, b in zip(ref, sim)] for sim in sims])
    pooled = [s for sim in sims for s in sim]
    per_seed = [r for r in (ratio_summary(sim) for sim in sims) if r is not None]
    return RuleAgreement(
        steps=n, seeds=len(sims), same_groups=float(np.mean(k_sim == k_real)), same_reason=float(same_reason.mean()),
        within_one=float(np.mean(np.abs(k_sim - k_real) <= 1)), mean_groups_real=float(k_real.mean()),
        mean_groups_sim=float(k_sim.mean()), reasons_real=_shares(ref), reasons_sim=_shares(pooled),
        ratio_real=ratio_summary(ref),
        ratio_sim=(float(np.mean([r[0] for r in per_seed])), float(np.mean([r[1] for r in per_seed])))
        if per_seed else None,
    )


def check_rule(cfg: WMRLConfig, trace: RuleTrace, seeds: Sequence[int], workers: int = 2) -> RuleAgreement:
    """Run the fitted simulator as the run was configured (its variant and rule, ``cfg``'s steps), every step
    logged, and compare its anchor groups with the run's."""
    run_cfg = dataclasses.replace(cfg, simulator=dataclasses.replace(cfg.simulator, log_every=1))
    jobs = [(run_cfg, cfg.algorithm.variant, int(seed), None) for seed in seeds]
    sweep = run_jobs(jobs, workers, progress=False, desc="anchor rule check")
    m = cfg.algorithm.groups_per_step
    return compare_traces(trace, [simulated_trace(r.history, r.steps, m) for r in sweep.runs])
