"""One WMRL step (paper §3), top to bottom, for every trainer.

    roles -> tasks -> rollouts -> anchor pairs -> calibration -> training scores -> advantages
          -> per-group weights -> learner update

written against the protocols of :mod:`wmrl.rollout`: a :class:`~wmrl.rollout.Policy` rolls out one
group of n trajectories per task, group g talking to ``envs[g]`` every turn (the *executed*
environment for anchor groups G_E, the *world-model* environment for the others G_WM); a
:class:`~wmrl.rollout.Learner` takes per-trajectory advantages and per-group weights. The synthetic
simulator (``wmrl/simulate/``), the anchored end-to-end run and the LLM trainer (``wmrl/trainers/``) are
implementations; each runs the step inside the one loop shell, :class:`wmrl.loop.LoopShell`.

Infrastructure failures (a trajectory whose score is ``None``: the workers gave up on an execution, a
world-model call failed past its retries) follow one rule: **the group is dropped from training that
step** (weight 0, its scores neither validated nor used; advantages are relative within a group, so a
group with a hole has no defined advantage). A dropped anchor group records **no** anchor pair either:
the pool holds whole groups only, because eta^2 normalises residuals by the within-group spread of the
true scores (Eq. 5), which a partial group misstates. An anchor trajectory whose final solution the
world model could not score (r_hat ``None``) keeps training on its true score r, but its group records
no pair. Weights (Eq. 5) are computed over the groups that train, so they still sum to one.

Accounting: the seconds and tokens of each phase (generation, world_model, execution) are *measured*
sums of what the policy and environments recorded on the trajectories, plus the world model's scoring of
the anchor trajectories (the anchor pairs); ``update`` is the learner's wall time, measured here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from wmrl.algorithm import (
    AlgorithmConfig,
    Variant,
    anchor_mask,
    group_advantages,
    group_weights,
    training_scores,
)
from wmrl.calibration.calibrator import Calibrator
from wmrl.calibration.pool import AnchorPair
from wmrl.rollout import (
    Environment,
    Feedback,
    Groups,
    Learner,
    Policy,
    Submission,
    Trajectory,
)

PHASES = ("generation", "world_model", "execution", "update")  # measured seconds; tokens in the first two


def step_seconds_key(phase: str) -> str:
    """The key of a step's seconds in ``phase`` in a metrics row (a run's running total is ``seconds_<phase>``)."""
    return f"step_seconds_{phase}"


# --------------------------------------------------------------------------- what a step returns


@dataclass
class StepResult:
    """Everything one step did, for the caller's logs. Arrays are indexed (group,) or (group, n)."""

    step: int
    task_ids: list[str]
    groups: Groups
    anchor: np.ndarray  # (G,) anchor groups (really executed), before failures
    dropped: np.ndarray  # (G,) groups with an infrastructure failure: not trained this step
    trained: np.ndarray  # (G,) groups with weight > 0
    r: np.ndarray  # (G, n) true scores of anchor groups (NaN elsewhere / on failures)
    r_hat: np.ndarray  # (G, n) world-model scores (NaN where none)
    scores: np.ndarray  # (G, n) training scores (r, r_hat or f_hat(r_hat)); NaN on untrained groups
    advantages: np.ndarray  # (G, n) Eq. 1/2; 0 on untrained groups
    weights: np.ndarray  # (G,) Eq. 5; sum to 1 over trained groups, all 0 when nothing trained
    rho: float  # the anchor-stream weight used (1 without denoising)
    pairs: int  # anchor pairs recorded this step
    refitted: bool  # f_hat was refit this step
    updated: bool  # the learner took an update
    executions: int  # submissions the executed environment evaluated (failed ones included)
    failed_executions: int  # of which the infrastructure gave up (score None)
    wm_calls: int  # submissions the world model evaluated (rollouts and anchor pairs)
    seconds: dict[str, float] = field(default_factory=dict)  # measured, per phase
    tokens: dict[str, int] = field(default_factory=dict)  # measured, per phase
    learner: dict[str, float] = field(default_factory=dict)  # what Learner.update returned
    reused_executions: int = 0  # of the executions, answered by an earlier one (launch.reuse_executions)
    execution_cpu_seconds: float = 0.0  # measured CPU of the executed programs (Feedback.cpu_seconds)
    anchor_reason: str = "fixed"  # why this many anchor groups (wmrl/anchor_rule.py REASONS; set by the shell)


# --------------------------------------------------------------------------- the step


def wmrl_step(
    step: int,
    *,
    variant: Variant,
    alg: AlgorithmConfig,
    task_pool: Sequence[str],
    policy: Policy,
    executed_env: Environment | None,
    world_model_env: Environment | None,
    learner: Learner,
    calibrator: Calibrator | None,
    rng: np.random.Generator,
    n_anchor: int | None = None,
    rho: float | None = None,
) -> StepResult:
    """One step; ``policy``, ``learner`` and ``calibrator`` are updated in place.

    ``world_model_env=None`` for variants that never use the world model (grpo_real/grpo_anchor_only):
    no r_hat is computed or paid for. Groups a variant does not train on are not rolled out at all.
    RNG draws, in this order (bit-identical runs): roles, tasks, then whatever the policy and the
    environments draw. ``n_anchor``: the number of anchor groups (the anchor rule's, :mod:`wmrl.anchor_rule`;
    None: round(anchor_frac * m)); ``rho``: the anchor weight instead of the calibrator's (the
    ``on_flat_world_model: shift`` response).
    """
    _check_arguments(variant, alg, executed_env, world_model_env)
    n = alg.group_size
    # 1. roles: which of the m groups are anchor groups G_E (really executed), the rest G_WM
    anchor = anchor_mask(variant, alg.groups_per_step, alg.anchor_frac, alg.min_anchor_groups, rng, n_anchor)
    if not variant.trains_on_wm:
        anchor = anchor[anchor]  # grpo_real / grpo_anchor_only: only anchor groups exist
    g = len(anchor)
    # 2. tasks: one per group
    task_ids = [task_pool[int(k)] for k in rng.choice(len(task_pool), size=g, replace=g > len(task_pool))]
    # 3. rollouts: every turn of an anchor group is executed, of a world-model group predicted
    envs = [executed_env if e else world_model_env for e in anchor]
    groups = policy.rollout(step, task_ids, n, envs, rng)  # type: ignore[arg-type]
    # 4. anchor pairs: the world model also scores each anchor trajectory's final solution
    if world_model_env is not None and anchor.any():
        pair_calls = _score_anchor_pairs(step, groups, anchor, world_model_env)
    else:
        pair_calls = PairCalls()
    r, r_hat = _score_arrays(groups, anchor)
    dropped = np.array([any(t.score is None for t in group) for group in groups], dtype=bool)
    # 5. calibration: observe the complete anchor groups' pairs (r_hat, r); refit f_hat when due
    #    (Eq. 4); eta^2 and rho (Eq. 5)
    pairs = anchor_pairs(step, task_ids, anchor & ~dropped, r_hat, r) if calibrator is not None else []
    refitted = False
    if calibrator is not None and pairs:
        refits = calibrator.debiaser.n_refits
        calibrator.observe(pairs, step)
        refitted = calibrator.debiaser.n_refits != refits
    if rho is None:
        rho = calibrator.rho if calibrator is not None else 1.0
    # 6. training scores: r on G_E, f_hat(r_hat) (debiasing, Eq. 4) or r_hat on G_WM
    trained = ~dropped & (anchor | variant.trains_on_wm)
    scores = np.full((g, n), np.nan)
    advantages = np.zeros((g, n))
    weights = np.zeros(g)
    updated = bool(trained.any())
    if updated:
        calibrate: Callable[[np.ndarray], np.ndarray] = calibrator.calibrate if calibrator else (lambda x: x)
        wm_trained = trained & ~anchor
        if calibrator is not None and wm_trained.any():
            calibrator.record_chased(r_hat[wm_trained])  # what GRPO chases: the audit's coverage check
        scores[trained] = training_scores(variant, r_hat[trained], r[trained], anchor[trained], calibrate)
        # 7. advantages A_i = r_i - mean_j r_j within each group (Eq. 1/2)
        advantages[trained] = group_advantages(scores[trained])
        # 8. per-group weights rho/(rho|G_E|+|G_WM|) and 1/(rho|G_E|+|G_WM|) over trained groups (Eq. 5)
        weights[trained] = group_weights(variant, rho, anchor[trained])
    # 9. update on the fused gradient
    started = time.perf_counter()
    learner_metrics = learner.update(groups, advantages, weights) if updated else {}
    update_seconds = time.perf_counter() - started
    anchor_subs = [fb for gi, group in enumerate(groups) if anchor[gi] for t in group for fb in _feedbacks(t)]
    wm_subs = sum(len(_feedbacks(t)) for gi, group in enumerate(groups) if not anchor[gi] for t in group)
    return StepResult(
        step=step, task_ids=task_ids, groups=groups, anchor=anchor, dropped=dropped, trained=trained,
        r=r, r_hat=r_hat, scores=scores, advantages=advantages, weights=weights, rho=rho, pairs=len(pairs),
        refitted=refitted, updated=updated, executions=len(anchor_subs),
        failed_executions=sum(fb.score is None for fb in anchor_subs), wm_calls=wm_subs + pair_calls.calls,
        reused_executions=sum("reused" in fb.details and fb.score is not None for fb in anchor_subs),
        execution_cpu_seconds=float(sum(fb.cpu_seconds for fb in anchor_subs)),
        **_phase_totals(groups, pair_calls, update_seconds), learner=learner_metrics,
    )


def _check_arguments(
    variant: Variant, alg: AlgorithmConfig, executed_env: Environment | None, world_model_env: Environment | None
) -> None:
    """Refuse a step that cannot run as asked, before anything is drawn or rolled out."""
    # ``alg`` was validated once, at load or by the trainer, for its own variant (the loop shell passes
    # variant = get_variant(alg.variant)). Another variant here would escape that check (min_anchor_groups
    # >= 1 when it draws anchors, paper §3.3): a ConfigError naming the key, before anything runs.
    if variant.name != alg.variant:
        replace(alg, variant=variant.name).validate()
    if variant.trains_on_wm and world_model_env is None:
        raise ValueError(f"variant {variant.name!r} trains on world-model groups but no world model was given")
    if variant.needs_anchors and executed_env is None:
        raise ValueError(f"variant {variant.name!r} executes anchor groups but no executed environment was given")


def _feedbacks(t: Trajectory) -> list[Feedback]:
    return [turn.feedback for turn in t.turns if turn.feedback is not None and turn.feedback.status != "no_code"]


def _score_arrays(groups: Groups, anchor: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(G, n) r and r_hat, read from the trajectories' scores (:class:`~wmrl.rollout.Trajectory`); NaN where
    there is none (an infrastructure failure, a failed pair call, r on a world-model group)."""
    shape = (len(groups), len(groups[0]) if groups else 0)
    r, r_hat = np.full(shape, np.nan), np.full(shape, np.nan)
    for gi, group in enumerate(groups):
        for t in group:
            true, predicted = (t.score, t.pair_score) if anchor[gi] else (None, t.score)
            r[gi, t.index] = np.nan if true is None else true
            r_hat[gi, t.index] = np.nan if predicted is None else predicted
    return r, r_hat


@dataclass(frozen=True)
class PairCalls:
    """The world model's calls on anchor trajectories' final solutions, counted in the step's totals."""

    calls: int = 0
    seconds: float = 0.0
    tokens: int = 0


def _score_anchor_pairs(step: int, groups: Groups, anchor: np.ndarray, world_model_env: Environment) -> PairCalls:
    """Every anchor trajectory's ``pair_score``: the world model's r_hat of its final solution, in one batch.

    A trajectory without code scores 0 on both sides (an invalid or missing submission is 0), so it
    gets r_hat = 0 without a call; a failed world-model call leaves it None (the group records no pair).
    """
    todo: list[tuple[Trajectory, Submission]] = []
    for gi in np.flatnonzero(anchor):
        for t in groups[gi]:
            if t.final_code is None:
                t.pair_score = 0.0
            else:
                todo.append((t, Submission.at(step, int(gi), t.index, None, t.task_id, t.final_code)))
    if not todo:
        return PairCalls()
    feedbacks = world_model_env.evaluate([sub for _, sub in todo])
    for (t, _), fb in zip(todo, feedbacks, strict=True):
        t.pair_score = fb.score
    return PairCalls(len(todo), float(sum(fb.seconds for fb in feedbacks)), int(sum(fb.tokens for fb in feedbacks)))


def _phase_totals(groups: Groups, pairs: PairCalls, update_seconds: float) -> dict[str, dict]:
    """The step's measured seconds and tokens per phase (:data:`PHASES`): the policy's rollouts, the world
    model's pair calls and the update."""
    flat = [t for group in groups for t in group]
    seconds = {p: float(sum(t.seconds.get(p, 0.0) for t in flat)) for p in PHASES[:3]}
    tokens = {p: int(sum(t.tokens.get(p, 0) for t in flat)) for p in PHASES}
    seconds["world_model"] += pairs.seconds
    tokens["world_model"] += pairs.tokens
    return {"seconds": {**seconds, "update": update_seconds}, "tokens": tokens}


def anchor_pairs(
    step: int, task_ids: Sequence[str], groups: np.ndarray, r_hat: np.ndarray, r: np.ndarray
) -> list[AnchorPair]:
    """The (r_hat, r) pairs of the given anchor groups that are complete (every trajectory has both);
    ids are per run: ``step/group/trajectory``."""
    complete = [gi for gi in np.flatnonzero(groups) if np.isfinite(r_hat[gi]).all() and np.isfinite(r[gi]).all()]
    return [
        AnchorPair(
            pair_id=f"{step}/{gi}/{i}", step=step, task_id=task_ids[gi], group_id=f"{step}/{gi}",
            traj_id=str(i), predicted=float(r_hat[gi, i]), true=float(r[gi, i]),
        )
        for gi in complete
        for i in range(r.shape[1])
    ]
