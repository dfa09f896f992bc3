"""One WMRL step (paper §3), top to bottom: sample -> score -> calibrate -> weight -> update.

Shared by ``wmrl simulate`` (``wmrl/simulate/train.py``: synthetic rollouts and executions) and the
end-to-end run (``wmrl/orchestration/anchored_sim.py``: anchors really executed through workers,
sandbox and grader). The two differ only in where scores come from, which is the :class:`ScoreSource`
they pass; everything else (group roles, world model, Calibrator, Eq. 1/2, 4, 5, the ascent step)
lives here once. Callers keep their own bookkeeping (history, metrics, checkpoints).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from wmrl.algorithm import (
    Variant,
    executed_groups,
    group_advantages,
    group_weights,
    training_scores,
)
from wmrl.calibration.calibrator import Calibrator
from wmrl.calibration.pool import AnchorPair
from wmrl.config import AlgorithmConfig
from wmrl.simulate.cost import CostMeter
from wmrl.simulate.policy import SoftmaxPolicy
from wmrl.simulate.world_model import SyntheticWorldModel


class ScoreSource(Protocol):
    """The tasks of a run and where the scores of their solutions come from."""

    n_tasks: int

    def task_id(self, task: int) -> str:
        """The id pairs are recorded under (the pool's task id, or the index in the simulator)."""
        ...

    def rollout(self, tasks: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """(G, n) score of each generated solution: its hidden true score (simulator) or the score
        known from the pool build; the world model predicts from it."""
        ...

    def execute(
        self, tasks: np.ndarray, actions: np.ndarray, scores: np.ndarray, anchor: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Really execute the anchor groups: ``(executed, anchor)`` with executed (G, n) true scores on
        anchor rows (NaN elsewhere) and the anchor mask less the groups whose execution failed."""
        ...


@dataclass(frozen=True)
class StepResult:
    """What one step did, for the caller's logs."""

    tasks: np.ndarray  # (G,) task index of each group
    actions: np.ndarray  # (G, n) candidate picked by each trajectory
    scores: np.ndarray  # (G, n) rollout scores (true or known)
    anchor: np.ndarray  # (G,) groups really executed (after failures were dropped)
    r_hat: np.ndarray  # (G, n) world-model scores (NaN when no world model scored)
    executed: np.ndarray  # (G, n) true scores of anchor groups, NaN elsewhere
    rho: float  # anchor-stream weight used by Eq. 5 (1 without a Calibrator)
    weights: np.ndarray  # (G,) per-group loss weights (Eq. 5); all 0 when no update was taken
    refitted: bool  # the Calibrator refit f_hat this step
    updated: bool  # an ascent step was taken (False: a variant with nothing to train on this step)


def anchor_pairs(
    step: int,
    task_id: Callable[[int], str],
    tasks: np.ndarray,
    anchor: np.ndarray,
    r_hat: np.ndarray,
    r: np.ndarray,
) -> list[AnchorPair]:
    """The (r_hat, r) pairs of the anchor groups; ids are per run: ``step/group/trajectory``."""
    return [
        AnchorPair(
            pair_id=f"{step}/{g}/{i}", step=step, task_id=task_id(int(tasks[g])), group_id=f"{step}/{g}",
            traj_id=str(i), predicted=float(r_hat[g, i]), true=float(r[g, i]),
        )
        for g in np.flatnonzero(anchor)
        for i in range(r.shape[1])
    ]


def wmrl_step(
    step: int,
    *,
    variant: Variant,
    alg: AlgorithmConfig,
    source: ScoreSource,
    policy: SoftmaxPolicy,
    world_model: SyntheticWorldModel | None,
    calibrator: Calibrator | None,
    meter: CostMeter,
    rng: np.random.Generator,
    lr: float,
    entropy_coef: float = 0.0,
) -> StepResult:
    """One step of the policy, calibrator and meter given (all updated in place).

    ``world_model=None``: no r_hat is computed or charged (for variants that do not train on it);
    Groups the variant does not train on (grpo_real / grpo_anchor_only world-model groups) are not sampled.
    RNG draws, in this order (bit-identical runs): roles, tasks, actions, rollout, execute, r_hat.
    """
    n = alg.group_size
    # 1. sample: group roles (G_E vs G_WM), one task per group, n trajectories per group
    anchor = executed_groups(variant, alg.groups_per_step, alg.anchor_frac, alg.min_anchor_groups, rng)
    if not variant.trains_on_wm:
        anchor = anchor[anchor]
    g = len(anchor)
    tasks = rng.choice(source.n_tasks, size=g, replace=g > source.n_tasks)
    actions = policy.sample(tasks, n, rng)
    scores = source.rollout(tasks, actions)
    # 2. score: anchors really executed (true r), every trajectory scored by the world model (r_hat)
    executed, anchor = source.execute(tasks, actions, scores, anchor)
    scored = world_model is not None
    r_hat = world_model.predict(scores, step, rng, tasks) if scored else np.full(scores.shape, np.nan)
    meter.charge(
        executions=int(anchor.sum()) * n, wm_calls=g * n if scored else 0, trajectories=g * n, updates=1
    )
    # 3. calibrate from the anchor pairs (r_hat, r): refit f_hat when due (Eq. 4), eta2 and rho (Eq. 5)
    refitted = False
    if calibrator is not None and anchor.any():
        refits = calibrator.debiaser.n_refits
        calibrator.observe(anchor_pairs(step, source.task_id, tasks, anchor, r_hat, executed), step)
        refitted = calibrator.debiaser.n_refits != refits
    rho = calibrator.rho if calibrator is not None else 1.0
    # 4. weight: train on r (anchors) and f_hat(r_hat) (Eq. 4) or r_hat; A_i = r_i - mean_j r_j (Eq. 1/2);
    #    per-group weights rho/(rho|G_E|+|G_WM|) and 1/(rho|G_E|+|G_WM|) (Eq. 5)
    updated = bool(anchor.any()) or variant.trains_on_wm  # not when every anchor execution failed
    weights = np.zeros(g)
    if updated:
        calibrate = calibrator.calibrate if calibrator is not None else (lambda x: x)
        if calibrator is not None and variant.trains_on_wm and (~anchor).any():
            calibrator.record_chased(r_hat[~anchor])  # what GRPO chases, for the audit's coverage check
        advantages = group_advantages(training_scores(variant, r_hat, executed, anchor, calibrate))
        weights = group_weights(variant, rho, anchor)
        # 5. update: one ascent step on the fused gradient (Eq. 1, Eq. 5)
        policy.step(policy.gradient(tasks, actions, advantages, weights, entropy_coef), lr)
    return StepResult(tasks, actions, scores, anchor, r_hat, executed, rho, weights, refitted, updated)
