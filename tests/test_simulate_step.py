"""Behaviour of the one WMRL step shared by ``wmrl simulate`` and the end-to-end anchored run."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pytest

from wmrl.algorithm import get_variant
from wmrl.calibration.calibrator import Calibrator
from wmrl.config import WMRLConfig, load_config, to_yaml
from wmrl.orchestration.anchored_sim import ExecutedScores, dry_candidates
from wmrl.orchestration.records import ExecutionOutcomeRecord, ExecutionRequest
from wmrl.orchestration.rundir import create_run_dir
from wmrl.simulate.cost import CostMeter
from wmrl.simulate.environment import make_environment
from wmrl.simulate.policy import SoftmaxPolicy
from wmrl.simulate.step import StepResult, anchor_pairs, wmrl_step
from wmrl.simulate.train import SyntheticScores
from wmrl.simulate.world_model import SyntheticWorldModel

# 8 groups of 4, 2 anchor groups (8 pairs) per step: f_hat is first fit at step 0, then every other step.
SMALL = ["algorithm.groups_per_step=8", "algorithm.group_size=4", "algorithm.anchor_frac=0.25",
         "algorithm.min_pairs=8", "algorithm.refit_every=16", "algorithm.eta_window=16"]


class FailingScores(SyntheticScores):
    """Synthetic scores whose execution fails for the first anchor group (as a worker that gave up)."""

    def execute(self, tasks, actions, scores, anchor):
        executed, anchor = super().execute(tasks, actions, scores, anchor)
        anchor = anchor.copy()
        anchor[np.flatnonzero(anchor)[0]] = False
        executed[~anchor] = np.nan
        return executed, anchor


@dataclass
class Run:
    """The real parts of a small simulated run, stepped with ``wmrl_step``."""

    cfg: WMRLConfig
    variant_name: str
    seed: int = 0
    failing: bool = False
    step_no: int = 0
    rng: np.random.Generator = field(init=False)

    def __post_init__(self) -> None:
        self.variant = get_variant(self.variant_name)
        self.rng = np.random.default_rng(self.seed)
        env = make_environment(self.cfg.simulator, self.seed)
        self.source = (FailingScores if self.failing else SyntheticScores)(env, self.rng)
        self.policy = SoftmaxPolicy(env.n_tasks, env.n_candidates)
        self.meter = CostMeter(self.cfg.simulator.cost)
        self.calibrator = (
            Calibrator(replace(self.cfg.algorithm, variant=self.variant_name),
                       debias=self.variant.debias, denoise=self.variant.denoise)
            if self.variant.trains_on_wm and self.variant.needs_anchors else None
        )

    def step(self, **kwargs) -> StepResult:
        kwargs.setdefault("world_model", SyntheticWorldModel(self.cfg.simulator))
        done = wmrl_step(
            self.step_no, variant=self.variant, alg=self.cfg.algorithm, source=self.source, policy=self.policy,
            calibrator=self.calibrator, meter=self.meter, rng=self.rng, lr=self.cfg.simulator.lr, **kwargs,
        )
        self.step_no += 1
        return done


def small_run(variant: str, *, failing: bool = False, seed: int = 0) -> Run:
    return Run(load_config(None, ["tracking.enabled=false", *SMALL]), variant, seed=seed, failing=failing)


def test_wmrl_executes_only_the_anchor_groups():
    run = small_run("wmrl")
    done = run.step()
    assert done.anchor.sum() == 2  # round(0.25 * 8)
    assert np.isnan(done.executed[~done.anchor]).all()
    assert np.isfinite(done.executed[done.anchor]).all()
    assert run.meter.executions == 2 * 4


def test_wmrl_scores_every_group_with_the_world_model():
    run = small_run("wmrl")
    done = run.step()
    assert np.isfinite(done.r_hat).all()
    assert run.meter.wm_calls == 8 * 4


def test_wmrl_group_weights_sum_to_one_with_anchors_weighted_by_rho():
    run = small_run("wmrl")
    for _ in range(4):  # past warm-up, so rho is estimated
        done = run.step()
    assert done.weights.sum() == pytest.approx(1.0)
    assert done.weights[done.anchor] == pytest.approx(done.rho / (done.rho * 2 + 6))
    assert done.weights[~done.anchor] == pytest.approx(1.0 / (done.rho * 2 + 6))


def test_grpo_real_executes_every_group():
    run = small_run("grpo_real")
    done = run.step(world_model=None)
    assert done.anchor.all() and len(done.anchor) == 8
    assert np.isfinite(done.executed).all()
    assert run.meter.executions == 8 * 4


def test_without_world_model_no_prediction_is_made_or_charged():
    run = small_run("grpo_real")
    done = run.step(world_model=None)
    assert np.isnan(done.r_hat).all()
    assert run.meter.wm_calls == 0


def test_untrained_groups_are_not_generated():
    run = small_run("grpo_anchor_only")
    done = run.step()
    assert len(done.anchor) == 2 and done.anchor.all()
    assert run.meter.trajectories == 2 * 4
    assert done.weights.sum() == pytest.approx(1.0)


def test_failed_execution_drops_its_group_from_the_anchors():
    run = small_run("wmrl", failing=True)
    done = run.step()
    assert done.anchor.sum() == 1  # 2 chosen, 1 failed
    assert len(run.calibrator.pool) == 4  # only the surviving group's pairs
    assert run.meter.executions == 4  # a failed execution is not charged
    assert done.weights[~done.anchor] == pytest.approx(1.0 / (done.rho * 1 + 7))  # trained as a WM group


def test_no_update_when_every_anchor_of_an_anchor_only_variant_failed():
    cfg = load_config(None, ["tracking.enabled=false", *SMALL, "algorithm.anchor_frac=0.125"])
    run = Run(cfg, "grpo_anchor_only", failing=True)
    logits = run.policy.logits.copy()
    done = run.step()
    assert not done.updated and not done.anchor.any()
    np.testing.assert_array_equal(run.policy.logits, logits)


def test_refitted_is_reported_exactly_on_the_steps_that_refit():
    run = small_run("wmrl")
    flags = [run.step().refitted for _ in range(6)]
    assert any(flags) and not all(flags)
    assert sum(flags) == run.calibrator.debiaser.n_refits


def test_anchor_pairs_hold_prediction_and_truth_of_anchor_groups_only():
    tasks = np.array([5, 6, 7])
    anchor = np.array([False, True, False])
    r_hat = np.arange(6, dtype=float).reshape(3, 2) / 10
    true = np.full((3, 2), np.nan)
    true[1] = [0.9, 0.8]
    pairs = anchor_pairs(3, lambda t: f"task-{t}", tasks, anchor, r_hat, true)
    assert [(p.pair_id, p.task_id, p.group_id, p.predicted, p.true) for p in pairs] == [
        ("3/1/0", "task-6", "3/1", 0.2, 0.9), ("3/1/1", "task-6", "3/1", 0.3, 0.8),
    ]


@dataclass
class ScriptedRunner:
    """The execution service's answer for given requests: done with the script's known score, except
    the requests of ``fail_group``, which the workers gave up on."""

    fail_group: int
    seen: list[ExecutionRequest] = field(default_factory=list)

    def execute(self, requests: list[ExecutionRequest], timeout_s: float) -> dict[str, ExecutionOutcomeRecord]:
        self.seen += requests
        return {
            r.request_id: ExecutionOutcomeRecord(
                r.request_id, r.run_id, "failed" if r.group_id == self.fail_group else "done",
                None if r.group_id == self.fail_group else 0.5, {}, "w0", 1, 0.0, 0.0, 0.0,
            )
            for r in requests
        }


def test_executed_scores_drop_a_group_the_workers_gave_up_on(tmp_path):
    cfg = load_config(None, [f"runs_root={tmp_path}", "run_name=step", "tracking.enabled=false"])
    table = dry_candidates(3, 4)
    runner = ScriptedRunner(fail_group=2)
    source = ExecutedScores(table, cfg, create_run_dir(cfg.run_dir, to_yaml(cfg)).run_id, 0, runner)
    tasks, actions = np.array([0, 1, 2]), np.array([[0, 1], [1, 2], [2, 3]])
    executed, anchor = source.execute(tasks, actions, source.rollout(tasks, actions), np.array([True, False, True]))
    assert {r.group_id for r in runner.seen} == {0, 2}  # only anchors are executed
    np.testing.assert_array_equal(anchor, [True, False, False])
    assert source.failed == 2
    assert np.isnan(executed[1:]).all() and (executed[0] == 0.5).all()
