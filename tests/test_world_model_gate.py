"""``algorithm.world_model_from: audit`` (issue 37): the world-model stream is held back until an audit of
the anchor pairs has run flat_top and monotonicity and neither flagged. Until then a step is
grpo_anchor_only's (only the anchor groups rolled out), with the world model scoring the anchors'
solutions, so pairs (and the audit) build up; the clearance survives a resume and a rewind."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from wmrl.anchor_rule import clears_world_model
from wmrl.calibration.calibrator import Calibrator
from wmrl.config import AlgorithmConfig, ConfigError, load_config
from wmrl.loop import LoopShell
from wmrl.simulate.simulator import simulated_parts

# 3 anchor groups of 4 a step: the audit's 200 pairs in 16 groups after 17 steps
SMALL = ["algorithm.groups_per_step=10", "algorithm.group_size=4", "algorithm.anchor_frac=0.3",
         "algorithm.refit_every=24", "algorithm.eta_window=24", "algorithm.world_model_from=audit"]


def _run(directory: Path, steps: int, *extra: str):
    cfg = load_config(None, [*SMALL, *extra])
    shell = LoopShell(cfg.algorithm, directory)
    rng = np.random.default_rng(0)
    parts = simulated_parts(cfg.simulator, 0, rng)
    done = []
    for step in range(steps):
        parts.world_model.step = step
        result, _ = shell.step(step, task_pool=parts.task_ids, policy=parts.agent, executed_env=parts.execution,
                               world_model_env=parts.world_model, learner=parts.learner, rng=rng)
        done.append(result)
    return shell, done


def test_the_world_model_trains_only_once_an_audit_has_cleared_it(tmp_path):
    shell, done = _run(tmp_path, 60)
    cleared_at = shell.calibrator.world_model_cleared_at
    assert cleared_at is not None, "the simulator's default world model ranks: an audit must clear it"
    gated = [d for d in done if d.anchor_reason == "gated"]
    assert gated and done[: len(gated)] == gated  # the first steps, until the clearing audit
    for d in gated:
        assert len(d.anchor) == 3 and d.anchor.all()  # only the anchor groups exist: no world-model rollouts
        assert d.wm_calls == d.executions > 0 and d.pairs == 12  # the world model scored every anchor solution
        assert (d.weights > 0).sum() == 3
    assert sum(d.pairs for d in gated) >= cleared_at  # the clearance came from the gated steps' pairs
    after = done[len(gated):]
    assert after and all(d.anchor_reason == "fixed" and len(d.anchor) == 10 for d in after)
    assert all((~d.anchor).sum() == 7 and d.wm_calls > d.executions for d in after)  # the stream trains now
    assert "gated" not in shell.progress()["anchor_reason"]


def test_the_paper_trains_on_the_world_model_from_the_first_step(tmp_path):
    _, done = _run(tmp_path, 2, "algorithm.world_model_from=start")
    assert [len(d.anchor) for d in done] == [10, 10] and all(d.anchor_reason == "fixed" for d in done)
    assert AlgorithmConfig().world_model_from == "start"


def test_progress_says_why_the_world_model_waits(tmp_path):
    shell, _ = _run(tmp_path, 2)
    reason = shell.progress()["anchor_reason"]
    assert shell.progress()["anchor_frac"] == 0.3
    assert reason.startswith("3 of 10 groups, anchors only: no audit has yet found") and "world_model_from" in reason


def test_resume_keeps_the_clearance_and_a_rewind_before_it_drops_it(tmp_path):
    shell, done = _run(tmp_path, 40)
    first_open = next(i for i, d in enumerate(done) if d.anchor_reason != "gated")
    shell.calibrator.save()
    resumed = LoopShell(shell.alg, tmp_path, resume=True)
    assert resumed.calibrator.world_model_cleared_at == shell.calibrator.world_model_cleared_at
    assert resumed.plan()[1] == shell.plan()[1] and resumed.plan()[0].name == "wmrl"
    before = Calibrator.load(shell.alg, tmp_path, step=first_open - 2)  # a checkpoint before the clearing audit
    assert not before.world_model_cleared


def test_an_audit_clears_only_when_both_ranking_checks_ran_and_neither_flagged():
    assert clears_world_model(["monotonicity", "stationarity", "flat_top"], [])
    assert not clears_world_model(["monotonicity", "stationarity"], [])  # flat_top skipped: too few top pairs
    assert not clears_world_model(["monotonicity", "flat_top"], ["flat_top"])
    assert not clears_world_model(["monotonicity", "flat_top"], ["monotonicity"])
    assert clears_world_model(["monotonicity", "flat_top", "task_bias"], ["task_bias"])  # not a ranking check


@pytest.mark.parametrize("response, reason", [("warn", "gated"), ("anchors_only", "anchors_only")])
def test_a_world_model_that_cannot_rank_never_trains(tmp_path, response, reason):
    """A world model flat at the top: the gate stays shut; once flat_top warns, ``anchors_only`` also stops
    the world model's calls (nothing left to find out), ``warn`` keeps scoring the anchors."""
    from test_anchor_rule import _observe_flat

    alg = AlgorithmConfig(min_pairs=100, refit_every=24, on_flat_world_model=response, groups_per_step=10,
                          anchor_frac=0.2, world_model_from="audit")
    shell = LoopShell(alg, None)
    _observe_flat(shell.calibrator, 100)
    assert shell.calibrator.warned("flat_top") and not shell.calibrator.world_model_cleared
    variant, decision, _ = shell.plan()
    assert variant.name == "grpo_anchor_only" and decision.reason == reason and decision.groups == 2


def test_a_bad_value_names_the_key_and_the_choices():
    with pytest.raises(ConfigError, match=r"world_model_from.*start.*audit"):
        load_config(None, ["algorithm.world_model_from=later"])


@pytest.mark.timeout(180)
def test_the_coordinators_run_holds_the_world_model_back_and_still_collects_pairs(tmp_path):
    """The anchored trainer (real coordinator, workers and executions): until an audit clears the world model
    (never within 4 steps: the audit needs 200 pairs), each step rolls out its anchor group alone, the world
    model scores its solutions, and the pairs reach the calibration's log; the metrics say why."""
    from launch_support import dry_config, make_run

    from wmrl.anchor_rule import REASONS
    from wmrl.calibration.pool import read_log
    from wmrl.orchestration.coordinator import Coordinator, iter_metrics

    run = make_run(dry_config(tmp_path, "gated", 4, "algorithm.world_model_from=audit"))
    assert Coordinator(str(run.path))()["state"] == "finished"
    metrics = list(iter_metrics(run))
    assert [REASONS[int(m["anchor/reason"])] for m in metrics] == ["gated"] * 4
    assert [m["anchor_groups"] for m in metrics] == [1] * 4
    logged = read_log(run.path / "calibration")
    assert sum(len(batch) for _, batch, _ in logged) == 4 * 3  # one anchor group of 3 a step, every pair kept
