"""Behaviour of the one WMRL step (``wmrl/step.py``), on the simulator's real parts (softmax policy,
synthetic benchmark, synthetic world model, real Calibrator) and the executed environment."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from wmrl.algorithm import get_variant
from wmrl.calibration.calibrator import Calibrator
from wmrl.config import VARIANTS, ConfigError, WMRLConfig, load_config
from wmrl.execution.config import LaunchConfig
from wmrl.execution.executed import ExecutedEnvironment
from wmrl.loop import calibrator_for, world_model_scores
from wmrl.rollout import Feedback
from wmrl.simulate.simulator import simulated_parts
from wmrl.step import StepResult, anchor_pairs, wmrl_step
from wmrl.storage.records import ExecutionOutcomeRecord, ExecutionRequest

# 8 groups of 4, 2 anchor groups (8 pairs) per step: f_hat is first fit at step 0, then every other step.
SMALL = ["algorithm.groups_per_step=8", "algorithm.group_size=4", "algorithm.anchor_frac=0.25",
         "algorithm.min_pairs=8", "algorithm.refit_every=16", "algorithm.eta_window=16"]


class FailingFirst:
    """Wraps an environment: the first submission of every batch gets no score (infrastructure failure),
    with the measured seconds it cost."""

    def __init__(self, env) -> None:
        self.env, self.role = env, env.role

    def evaluate(self, submissions):
        out = self.env.evaluate(submissions)
        out[0] = Feedback(out[0].key, "", None, False, "failed", 2.0)
        return out


class Timed:
    """Wraps an environment: every feedback reports ``seconds`` (as a worker's record would)."""

    def __init__(self, env, seconds: float) -> None:
        self.env, self.role, self.seconds = env, env.role, seconds

    def evaluate(self, submissions):
        out = self.env.evaluate(submissions)
        for fb in out:
            fb.seconds = self.seconds
        return out


class RecordingCalibrator(Calibrator):
    """The real Calibrator, remembering what the step showed the audit."""

    chased: list[np.ndarray]

    def record_chased(self, r_hat) -> None:
        self.__dict__.setdefault("chased", []).append(np.array(r_hat, dtype=float))
        super().record_chased(r_hat)


@dataclass
class Run:
    """The real parts of a small simulated run, stepped with ``wmrl_step``."""

    cfg: WMRLConfig
    variant_name: str
    seed: int = 0
    fail_execution: bool = False
    fail_world_model: bool = False
    step_no: int = 0
    calibrator: Calibrator | None = field(init=False)

    def __post_init__(self) -> None:
        self.variant = get_variant(self.variant_name)
        self.rng = np.random.default_rng(self.seed)
        parts = simulated_parts(self.cfg.simulator, self.seed, self.rng)  # what `wmrl simulate` steps
        self.task_ids, self.policy, self.agent, self.learner = parts.task_ids, parts.policy, parts.agent, parts.learner
        execution = Timed(parts.execution, 3.0)
        self.execution = FailingFirst(execution) if self.fail_execution else execution
        world_model = Timed(parts.world_model, 0.25)
        self.world_model = FailingFirst(world_model) if self.fail_world_model else world_model
        self.calibrator = calibrator_for(self.variant, self.cfg.algorithm)
        if self.calibrator is not None:
            self.calibrator = RecordingCalibrator(self.cfg.algorithm, debias=self.variant.debias,
                                                  denoise=self.variant.denoise)

    def step(self) -> StepResult:
        done = wmrl_step(
            self.step_no, variant=self.variant, alg=self.cfg.algorithm, task_pool=self.task_ids,
            policy=self.agent, executed_env=self.execution,
            world_model_env=self.world_model if world_model_scores(self.variant) else None,
            learner=self.learner, calibrator=self.calibrator, rng=self.rng,
        )
        self.step_no += 1
        return done


def small_run(variant: str, *extra: str, **kw) -> Run:
    return Run(load_config(None, ["tracking.enabled=false", *SMALL, *extra]), variant, **kw)


def test_wmrl_executes_only_the_anchor_groups():
    done = small_run("wmrl").step()
    assert done.anchor.sum() == 2  # round(0.25 * 8)
    assert np.isnan(done.r[~done.anchor]).all() and np.isfinite(done.r[done.anchor]).all()
    assert done.executions == 2 * 4


def test_the_world_model_scores_every_trajectory_including_the_anchor_pairs():
    done = small_run("wmrl").step()
    assert np.isfinite(done.r_hat).all()
    assert done.wm_calls == 8 * 4
    assert done.pairs == 2 * 4


def test_wmrl_group_weights_sum_to_one_with_anchors_weighted_by_rho():
    run = small_run("wmrl")
    for _ in range(4):  # past warm-up, so rho is estimated
        done = run.step()
    assert done.weights.sum() == pytest.approx(1.0)
    assert done.weights[done.anchor] == pytest.approx(done.rho / (done.rho * 2 + 6))
    assert done.weights[~done.anchor] == pytest.approx(1.0 / (done.rho * 2 + 6))


def test_grpo_real_executes_every_group_and_calls_no_world_model():
    done = small_run("grpo_real").step()
    assert done.anchor.all() and len(done.anchor) == 8
    assert np.isnan(done.r_hat).all() and done.wm_calls == 0
    assert done.executions == 8 * 4 and done.reused_executions == 0


def test_the_step_counts_the_executions_an_earlier_one_answered():
    class Reusing:  # every other feedback an earlier execution's, as launch.reuse_executions returns it
        def __init__(self, env) -> None:
            self.env, self.role = env, env.role

        def evaluate(self, submissions):
            out = self.env.evaluate(submissions)
            for fb in out[::2]:
                fb.details = {**fb.details, "reused": "earlier-request"}
            return out

    run = small_run("grpo_real")
    run.execution = Reusing(run.execution)
    done = run.step()
    assert done.executions == 32 and done.reused_executions == 16


def test_groups_a_variant_does_not_train_on_are_not_rolled_out():
    done = small_run("grpo_anchor_only").step()
    assert len(done.groups) == 2 and done.anchor.all()
    assert done.weights.sum() == pytest.approx(1.0)


@pytest.mark.parametrize("variant", [v for v in VARIANTS if get_variant(v).needs_anchors])
def test_a_failed_execution_drops_its_group_and_the_step_goes_on(variant):
    run = small_run(variant, fail_execution=True)
    done = run.step()  # before the fix: "NaN or outside [0, 1]" for grpo_real / grpo_anchor_only
    failed = [gi for gi, group in enumerate(done.groups) if any(t.score is None for t in group)]
    assert len(failed) == 1 and done.dropped[failed].all()
    assert done.weights[failed[0]] == 0.0 and np.isnan(done.scores[failed[0]]).all()
    assert done.weights.sum() == pytest.approx(1.0 if done.trained.any() else 0.0)
    assert done.failed_executions == 1


def test_a_dropped_anchor_group_records_no_pair():
    run = small_run("wmrl", fail_execution=True)
    done = run.step()
    assert done.pairs == 4 and len(run.calibrator.pool) == 4  # only the complete anchor group
    assert {p.group_id for p in run.calibrator.pool.recent(8)} == {f"0/{int(g)}" for g in
                                                                  np.flatnonzero(done.anchor & ~done.dropped)}


def test_weights_with_a_dropped_anchor_group_count_only_the_trained_groups():
    run = small_run("wmrl", fail_execution=True)
    done = run.step()
    assert done.weights[done.trained & ~done.anchor] == pytest.approx(1.0 / (done.rho * 1 + 6))


@pytest.mark.parametrize("variant", [v for v in VARIANTS if get_variant(v).trains_on_wm])
def test_a_failed_world_model_call_drops_its_group(variant):
    done = small_run(variant, fail_world_model=True).step()
    assert done.dropped.sum() == 1 and done.weights[done.dropped].sum() == 0.0
    assert done.weights.sum() == pytest.approx(1.0)


def test_no_update_when_every_anchor_of_an_anchor_only_variant_failed():
    run = small_run("grpo_anchor_only", "algorithm.anchor_frac=0.125", fail_execution=True)
    logits = run.policy.logits.copy()
    done = run.step()
    assert not done.updated and not done.trained.any()
    np.testing.assert_array_equal(run.policy.logits, logits)


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v not in ("grpo_real", "pure_wm")])
def test_min_anchor_groups_zero_is_a_config_error_naming_the_key(variant):
    # valid for pure_wm (the config's own variant), not for a variant that draws anchors (a sweep)
    cfg = load_config(None, ["tracking.enabled=false", *SMALL, "algorithm.variant=pure_wm",
                             "algorithm.min_anchor_groups=0", "algorithm.groups_per_step=4",
                             "algorithm.anchor_frac=0.1"])
    run = Run(cfg, "pure_wm")
    run.variant = get_variant(variant)
    with pytest.raises(ConfigError, match=r"algorithm\.min_anchor_groups=0 is not allowed"):
        run.step()


def test_the_step_shows_the_audit_exactly_the_world_model_scores_it_trains_on():
    run = small_run("mixture")
    done = run.step()
    wm_groups = done.trained & ~done.anchor
    assert len(run.calibrator.chased) == 1
    np.testing.assert_array_equal(run.calibrator.chased[0], done.r_hat[wm_groups])


def test_phase_seconds_are_the_sums_of_what_the_environments_recorded():
    done = small_run("wmrl").step()
    assert done.seconds["execution"] == pytest.approx(3.0 * done.executions)
    # the world model's calls: the world-model groups' rollouts (in their trajectories' seconds) and the
    # anchor pairs (the step's own calls, counted in its totals only: a trajectory holds its rollout)
    assert done.seconds["world_model"] == pytest.approx(0.25 * done.wm_calls)
    in_rollouts = sum(t.seconds.get("world_model", 0.0) for g in done.groups for t in g)
    assert in_rollouts == pytest.approx(0.25 * (done.wm_calls - done.pairs)) and done.pairs > 0
    assert set(done.seconds) == {"generation", "world_model", "execution", "update"}


def test_refitted_is_reported_exactly_on_the_steps_that_refit():
    run = small_run("wmrl")
    flags = [run.step().refitted for _ in range(6)]
    assert any(flags) and not all(flags)
    assert sum(flags) == run.calibrator.debiaser.n_refits


def test_anchor_pairs_hold_complete_anchor_groups_only():
    anchor = np.array([False, True, True])
    r_hat = np.arange(6, dtype=float).reshape(3, 2) / 10
    true = np.full((3, 2), np.nan)
    true[1] = [0.9, 0.8]
    true[2] = [0.7, np.nan]  # one execution failed: the group records nothing
    pairs = anchor_pairs(3, ["a", "b", "c"], anchor, r_hat, true)
    assert [(p.pair_id, p.task_id, p.group_id, p.predicted, p.true) for p in pairs] == [
        ("3/1/0", "b", "3/1", 0.2, 0.9), ("3/1/1", "b", "3/1", 0.3, 0.8),
    ]


@pytest.mark.parametrize("variant,expected", [("wmrl", (True, True)), ("mixture", (False, False)),
                                              ("denoise_only", (False, True)), ("debias_only", (True, False))])
def test_variants_get_a_calibrator_with_their_flags(variant, expected):
    cal = calibrator_for(get_variant(variant), load_config(None, ["tracking.enabled=false"]).algorithm)
    assert (cal.debias, cal.denoise) == expected


@pytest.mark.parametrize("variant", ["grpo_real", "grpo_anchor_only", "pure_wm"])
def test_variants_without_calibration_get_no_calibrator(variant):
    assert calibrator_for(get_variant(variant), load_config(None, ["tracking.enabled=false"]).algorithm) is None


# --------------------------------------------------------------------------- the executed environment


@dataclass
class ScriptedRunner:
    """The execution service's answer: done with score 0.5 after 7 s, except requests of ``fail_group``
    (the workers gave up) and of ``lost_group`` (no result by the deadline)."""

    fail_group: int = -1
    lost_group: int = -1
    seen: list[ExecutionRequest] = field(default_factory=list)

    def execute(self, requests, timeout_s):
        self.seen += requests
        out = {}
        for r in requests:
            if r.group_id == self.lost_group:
                continue
            failed = r.group_id == self.fail_group
            out[r.request_id] = ExecutionOutcomeRecord(
                r.request_id, r.run_id, "failed" if failed else "done", None if failed else 0.5,
                {"status": "ok", "stdout_tail": "0.5\n"}, "w0", 1, 0.0, 7.0, 7.0)
        return out


def _subs():
    from wmrl.rollout import Submission

    return [Submission(f"3/{g}/{i}/1", "task-a", "print(0.5)") for g in range(3) for i in range(2)]


def test_executed_environment_requests_carry_the_submission_coordinates():
    runner = ScriptedRunner()
    ExecutedEnvironment(runner, "run1", 20.0, LaunchConfig()).evaluate(_subs())
    assert [(r.step, r.group_id, r.traj_id, r.turn, r.task_id) for r in runner.seen][:2] == [
        (3, 0, 0, 1, "task-a"), (3, 0, 1, 1, "task-a")]


def test_a_batch_waits_for_executions_the_machine_held_back_up_to_their_hard_wall_limit():
    @dataclass
    class DeadlineRunner(ScriptedRunner):
        waited: list[float] = field(default_factory=list)

        def execute(self, requests, timeout_s):
            self.waited.append(timeout_s)
            return super().execute(requests, timeout_s)

    launch = LaunchConfig()
    runners = [DeadlineRunner(), DeadlineRunner()]
    ExecutedEnvironment(runners[0], "run1", 600.0, launch).evaluate(_subs())
    ExecutedEnvironment(runners[1], "run1", 600.0, launch, max_wall_factor=4.0).evaluate(_subs())
    rounds = -(-len(_subs()) // launch.workers)
    # Every round of workers may take each attempt to the hard wall limit (sandbox.max_wall_factor).
    assert runners[1].waited[0] >= rounds * launch.max_attempts * 600.0 * 4.0
    assert runners[0].waited[0] < rounds * launch.max_attempts * 600.0 * 4.0


def test_executed_environment_reports_the_workers_measured_seconds_and_score():
    fb = ExecutedEnvironment(ScriptedRunner(), "run1", 20.0, LaunchConfig()).evaluate(_subs())[0]
    assert (fb.score, fb.seconds, fb.valid, fb.text) == (0.5, 7.0, True, "0.5\n")


def test_executed_environment_gives_no_score_for_given_up_or_missing_executions():
    feedback = ExecutedEnvironment(ScriptedRunner(fail_group=1, lost_group=2), "run1", 20.0,
                                   LaunchConfig()).evaluate(_subs())
    assert [fb.score for fb in feedback] == [0.5, 0.5, None, None, None, None]
    assert {fb.status for fb in feedback[2:]} == {"failed"}


def test_executed_environment_refuses_a_key_that_is_not_four_integers():
    from wmrl.rollout import Submission

    with pytest.raises(ValueError, match="step/group/trajectory/turn"):
        ExecutedEnvironment(ScriptedRunner(), "run1", 20.0, LaunchConfig()).evaluate(
            [Submission("3/0/pair", "t", "x")])


def test_reused_executions_run_each_code_once_per_task_and_cost_nothing_after():
    """launch.reuse_executions: a batch's copies of one code run once, a later batch's copy not at all,
    and the same code for another task is another program; each feedback keeps its own key."""
    from wmrl.rollout import Submission

    runner = ScriptedRunner()
    env = ExecutedEnvironment(runner, "run1", 20.0, LaunchConfig(reuse_executions=True))
    feedback = env.evaluate(_subs())  # six copies of one code, one task
    assert len(runner.seen) == 1 and [fb.key for fb in feedback] == [s.key for s in _subs()]
    ran = runner.seen[0].request_id
    assert [fb.score for fb in feedback] == [0.5] * 6 and [fb.seconds for fb in feedback] == [7.0] + [0.0] * 5
    assert "reused" not in feedback[0].details and {fb.details["reused"] for fb in feedback[1:]} == {ran}
    later = env.evaluate([Submission("4/0/0/1", "task-a", "print(0.5)"), Submission("4/0/1/1", "task-b", "print(0.5)")])
    assert [r.task_id for r in runner.seen[1:]] == ["task-b"]  # task-a's copy was not run again
    assert later[0].details["reused"] == ran and later[0].seconds == 0.0 and later[1].seconds == 7.0
    assert env.reused == 6


def test_a_code_whose_execution_failed_is_not_reused_and_runs_again():
    from wmrl.rollout import Submission

    runner = ScriptedRunner(fail_group=0)
    env = ExecutedEnvironment(runner, "run1", 20.0, LaunchConfig(reuse_executions=True))
    first = env.evaluate([Submission(f"3/0/{i}/1", "task-a", "print(0.5)") for i in range(2)])
    assert [fb.score for fb in first] == [None, None] and len(runner.seen) == 1 and env.reused == 0
    again = env.evaluate([Submission("4/1/0/1", "task-a", "print(0.5)")])
    assert len(runner.seen) == 2 and again[0].score == 0.5 and "reused" not in again[0].details


def test_without_reuse_every_copy_runs():
    env = ExecutedEnvironment(runner := ScriptedRunner(), "run1", 20.0, LaunchConfig())
    assert all(fb.seconds == 7.0 for fb in env.evaluate(_subs())) and len(runner.seen) == 6


def test_the_run_totals_count_reused_executions_and_read_checkpoints_from_before_them():
    from wmrl.trainers.common import RunTotals

    totals = RunTotals(executions=8, reused_executions=5)
    assert RunTotals.from_dict(totals.to_dict()) == totals
    old = {k: v for k, v in totals.to_dict().items() if k != "reused_executions"}
    assert RunTotals.from_dict(old).reused_executions == 0
    assert totals.as_metrics()["reused_executions"] == 5.0 and totals.progress()["reused_executions"] == 5
