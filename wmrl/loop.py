"""The shell every trainer runs around :func:`wmrl.step.wmrl_step`, the same for all three.

What is the same whatever the parts (the testbed's softmax policy, the anchored run's real solutions,
the LLM agent): the variant, derived once from the algorithm's config; the calibrator, set up fresh
(its files of an earlier attempt removed) or resumed from its directory, and rewound to a learner
checkpoint; the world model called only by variants that train on it; after each step the refit and
the Assumption-6 audit bookkeeping (the last refit's step, the last audit, the checks whose warning
persisted); the calibration directory the coordinator snapshots; the calibration part of the progress.
A trainer keeps its parts, its own metrics and its own saved state.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from wmrl.algorithm import AlgorithmConfig, Variant, get_variant
from wmrl.anchor_rule import CANNOT_RANK_CHECKS, AnchorDecision, decide
from wmrl.calibration.audit import AuditReport
from wmrl.calibration.calibrator import AUDIT_NAME, STATE_NAME, Calibrator, read_audit
from wmrl.calibration.pool import LOG_NAME
from wmrl.rollout import Environment, Learner, Policy
from wmrl.step import StepResult, wmrl_step


def calibrator_for(
    variant: Variant, alg: AlgorithmConfig, directory: Path | None = None, *, resume: bool = False,
    durable: bool = True,
) -> Calibrator | None:
    """The one place that decides which variant calibrates and how (Eq. 4 debias, Eq. 5 denoise).

    Variants that train on world-model groups *and* draw anchors get a Calibrator with their flags;
    ``grpo_real``/``grpo_anchor_only`` (nothing to calibrate) and ``pure_wm`` (no anchors) get none.
    ``resume``: reload the state in ``directory`` when there is one; ``durable=False``: no fsync per
    step of the pool's log (a run nobody resumes, see :class:`~wmrl.calibration.pool.AnchorPool`).
    """
    if not (variant.trains_on_wm and variant.needs_anchors):
        return None
    if directory is not None and resume and (Path(directory) / STATE_NAME).exists():
        return Calibrator.load(alg, Path(directory))
    return Calibrator(alg, directory, debias=variant.debias, denoise=variant.denoise, durable=durable)


def world_model_scores(variant: Variant) -> bool:
    """Whether the world model is called at all: only variants that train on its scores pay for it."""
    return variant.trains_on_wm


def clear_calibration(directory: Path) -> None:
    """Remove what a Calibrator writes in ``directory`` (the pair log, its snapshot, the audit), nothing
    else: a fresh start must not find the state of an attempt that was never checkpointed."""
    for name in (LOG_NAME, STATE_NAME, AUDIT_NAME):
        (Path(directory) / name).unlink(missing_ok=True)


def _finite(value: float | None) -> float | None:
    return value if value is not None and np.isfinite(value) else None


class LoopShell:
    """``directory``: where the calibrator keeps its state (None: in memory only); ``resume``: reload it
    from there, else start fresh; ``durable=False``: no fsync per step (a run nobody resumes)."""

    def __init__(self, alg: AlgorithmConfig, directory: Path | None, *, resume: bool = False,
                 durable: bool = True) -> None:
        self.alg, self.variant = alg, get_variant(alg.variant)
        self.directory = None if directory is None else Path(directory)
        if self.directory is not None and not resume:
            clear_calibration(self.directory)
        self.calibrator = calibrator_for(self.variant, alg, self.directory, resume=resume, durable=durable)
        self.last_refit_step: int | None = None
        self.last_audit: AuditReport | None = None
        self.warned: list[str] = []  # checks whose warning persisted (thresholds.persist audits in a row)
        self.last_decision: AnchorDecision | None = None  # the anchor rule's, for the latest step

    def plan(self) -> tuple[Variant, AnchorDecision, float | None]:
        """The next step's variant, anchor-group count (``algorithm.anchor_rule``) and anchor weight, from
        the calibration's state alone (so a resumed run plans the same step). Once the audit warns that the
        world model cannot rank (a check of ``CANNOT_RANK_CHECKS``: flat_top or monotonicity),
        ``algorithm.on_flat_world_model`` answers: ``shift`` weighs the anchor stream at w_max,
        ``anchors_only`` runs the step as grpo_anchor_only (its anchor count, no world model). With
        ``algorithm.world_model_from: audit`` the steps before an audit has cleared the world model run
        as grpo_anchor_only too (``gated``), the world model scoring the anchors' solutions.
        Pure: the rate form's carry moves when the step records the decision (``Calibrator.record_anchor``)."""
        alg, cal = self.alg, self.calibrator
        decision = decide(alg.anchor_rule, alg.groups_per_step, alg.anchor_frac, alg.min_anchor_groups,
                          alg.w_max, None if cal is None else cal.rule_inputs(), alg.anchor_max_gap)
        cannot_rank = [] if cal is None else [c for c in CANNOT_RANK_CHECKS if cal.warned(c)]
        if cannot_rank and alg.on_flat_world_model == "anchors_only":
            return get_variant("grpo_anchor_only"), self._anchors_only(
                "anchors_only", f"the audit warned that the world model cannot rank ({', '.join(cannot_rank)}; "
                "on_flat_world_model)"), None
        if cal is not None and alg.world_model_from == "audit" and not cal.world_model_cleared:
            return get_variant("grpo_anchor_only"), self._anchors_only(
                "gated", "no audit has yet found that the world model can rank (flat_top and monotonicity "
                "run on the anchor pairs, neither flagged; world_model_from: audit): the world model only "
                "scores the anchors' solutions"), None
        if cannot_rank and alg.on_flat_world_model == "shift":
            return self.variant, decision, alg.w_max
        return self.variant, decision, None

    def _anchors_only(self, reason: str, why: str) -> AnchorDecision:
        """A grpo_anchor_only step at the fixed rule's count; the rate form's carry waits, as the rest of
        the calibration's state."""
        alg, cal = self.alg, self.calibrator
        assert cal is not None
        k = decide("fixed", alg.groups_per_step, alg.anchor_frac, alg.min_anchor_groups, alg.w_max, None).groups
        return AnchorDecision(k, reason, f"{k} of {alg.groups_per_step} groups, anchors only: {why}",
                              carry=cal.anchor_carry)

    @property
    def calls_world_model(self) -> bool:
        return world_model_scores(self.variant)

    def step(self, step: int, *, task_pool: Sequence[str], policy: Policy, executed_env: Environment | None,
             world_model_env: Environment | None, learner: Learner,
             rng: np.random.Generator) -> tuple[StepResult, AuditReport | None]:
        """One :func:`~wmrl.step.wmrl_step`, then its bookkeeping; the audit when one fell due, else None."""
        variant, decision, rho = self.plan()
        self.last_decision = decision
        if self.calibrator is not None:
            self.calibrator.record_anchor(decision, self.alg.groups_per_step)
        # a gated step trains as grpo_anchor_only but has the world model score its anchors (the pairs)
        scores_pairs = world_model_scores(variant) or decision.reason == "gated"
        done = wmrl_step(
            step, variant=variant, alg=self.alg, task_pool=task_pool, policy=policy, executed_env=executed_env,
            world_model_env=world_model_env if scores_pairs else None,
            learner=learner, calibrator=self.calibrator, rng=rng,
            # the fixed rule keeps today's draw path (round(anchor_frac * m) inside the step)
            n_anchor=None if decision.reason == "fixed" else decision.groups, rho=rho,
        )
        done.anchor_reason = decision.reason
        if done.refitted:
            self.last_refit_step = step
        audit = None
        if self.calibrator is not None and self.calibrator.audit_due:
            # Assumption 6 (monotone, stationary bias), every refit_every new pairs (each refit when
            # debiasing); the report lands in calibration/audit.json, the log, `wmrl status` and MLflow.
            audit = self.last_audit = self.calibrator.audit()
            self.warned += [c for c in audit.streaks if c in audit.flags
                            and audit.streaks[c] >= audit.thresholds.persist and c not in self.warned]
        return done, audit

    def rewind(self, step: int) -> None:
        """The calibrator as of the end of step ``step - 1`` (a learner checkpoint's; later records are
        cut), or a fresh one at step 0."""
        if self.calibrator is None or self.directory is None:
            return
        if step > 0 and (self.directory / STATE_NAME).exists():
            self.calibrator = Calibrator.load(self.alg, self.directory, step=step - 1)
        else:
            clear_calibration(self.directory)
            self.calibrator = calibrator_for(self.variant, self.alg, self.directory)

    def snapshot_dirs(self) -> dict[str, Path]:
        """What the coordinator copies into a checkpoint: the calibration directory, saved now."""
        if self.calibrator is None or self.directory is None:
            return {}
        self.calibrator.save()  # record_chased() updates the audit's coverage data without saving
        return {"calibration": self.directory}

    def progress(self) -> dict[str, Any]:
        """rho, pairs, refits, eta2, the last refit and the latest audit: ``progress.json``, ``wmrl status``."""
        snap = self.calibrator.snapshot() if self.calibrator is not None else {}
        audit = read_audit(self.directory) if self.directory is not None else None
        # after a resume, the decision the calibration state was saved with until the next step decides
        last = self.last_decision or (self.calibrator.anchor if self.calibrator is not None else None)
        if last is not None and (self.variant.all_anchor or not self.variant.needs_anchors):
            # no rule decides here: grpo_real executes every group, pure_wm none
            m = self.alg.groups_per_step
            everything = self.variant.all_anchor
            last = AnchorDecision(m if everything else 0, last.reason,
                                  f"{'every' if everything else 'no'} group executed ({self.variant.name})")
        return {
            "rho": _finite(snap.get("rho")), "n_pairs": _finite(snap.get("n_pairs")),
            "n_refits": _finite(snap.get("n_refits")), "eta2": _finite(snap.get("eta2")),
            "audit_ok": None if audit is None else audit["ok"],
            "audit_warnings": [] if audit is None else audit["warnings"],
            "audit_skipped": [] if audit is None else audit["skipped"],
            "last_refit_step": self.last_refit_step,
            "anchor_frac": None if last is None else last.frac(self.alg.groups_per_step),
            "anchor_reason": None if last is None else last.detail,
        }
