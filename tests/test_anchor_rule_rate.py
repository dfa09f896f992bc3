"""The adaptive anchor rule's rate form (``algorithm.anchor_max_gap`` >= 1, issue 37): the variance bound
as a rate realised by a carry, the max-gap floor, warm-up at k0, the config checks, the exact resume of
the carry, and what metrics and progress show."""

from __future__ import annotations

import math
import shutil
import signal
from pathlib import Path

import numpy as np
import pytest
from launch_support import (
    dry_config,
    events,
    final_digest,
    make_run,
    progress_step,
    spawn_coordinator,
    wait_until,
)

from wmrl.anchor_rule import RuleInputs, carried, decide, variance_groups, variance_rate
from wmrl.config import ConfigError, load_config
from wmrl.loop import LoopShell
from wmrl.orchestration.coordinator import Coordinator, iter_metrics
from wmrl.simulate.simulator import simulated_parts
from wmrl.sweep.rule_trace import replay


def _realise(rate_state: RuleInputs, steps: int, m: int = 8, frac: float = 0.1, low: int = 0, gap: int = 4,
             w_max: float = 4.0) -> list[int]:
    """Decide ``steps`` times from one calibration state, feeding each decision's carry to the next."""
    ks, carry = [], 0.0
    for _ in range(steps):
        d = decide("adaptive", m, frac, low, w_max, RuleInputs(**{**rate_state.__dict__, "carry": carry}), gap)
        ks.append(d.groups)
        carry = d.carry
    return ks


@pytest.mark.parametrize("ratio", [0.85, 0.9, 0.95, 1.0, 1.3, 3.0])
def test_the_rate_is_the_variance_bound_and_the_counts_follow_it_within_one_group(ratio):
    m, k0 = 8, 1
    state = RuleInputs(True, ratio * 0.1, 0.1)
    d = decide("adaptive", m, 0.1, 0, 4.0, state, 4)
    assert d.rate == pytest.approx(max(0.25, variance_rate(1.0 + ratio, m, k0)))
    ks = _realise(state, 200)
    assert set(ks) <= {math.floor(d.rate), math.ceil(d.rate)}
    assert abs(sum(ks) - 200 * d.rate) < 1.0  # the running mean matches the rate
    # whole groups (anchor_max_gap 0) round the same bound up instead
    assert decide("adaptive", m, 0.1, 0, 4.0, state).groups == max(0, variance_groups(1.0 + ratio, m, k0))


def test_a_precise_world_model_gets_one_anchor_group_in_every_max_gap_steps():
    precise = RuleInputs(True, 0.0, 0.1)  # rho = 1: the variance does not depend on k
    for gap in (1, 2, 3, 4, 7):
        ks = _realise(precise, 60, gap=gap)
        assert sum(ks) == 60 // gap
        assert all(sum(ks[i:i + gap]) >= 1 for i in range(60 - gap + 1))  # never gap steps without one
    d = decide("adaptive", 8, 0.1, 0, 4.0, precise, 4)
    assert (d.reason, d.rate) == ("max_gap", 0.25)


def test_carry_arithmetic_owes_whole_groups_on_time():
    assert carried(0.25, 0.75) == (1, 0.0)
    assert carried(1 / 7, 6 / 7)[0] == 1  # float sums that fall a hair short still owe the group
    k, carry = carried(2.5, 0.6)
    assert k == 3 and carry == pytest.approx(0.1)


def test_warm_up_draws_k0_and_the_audit_and_coverage_raise_the_rate():
    warm = decide("adaptive", 8, 0.1, 0, 4.0, RuleInputs(False, None, None), 4)
    assert (warm.groups, warm.reason, warm.carry) == (1, "warm-up", 0.0)
    base = decide("adaptive", 8, 0.1, 0, 4.0, RuleInputs(True, 0.01, 0.1), 4)
    broken = decide("adaptive", 8, 0.1, 0, 4.0, RuleInputs(True, 0.01, 0.1, ("stationarity",)), 4)
    starved = decide("adaptive", 8, 0.1, 0, 4.0, RuleInputs(True, 0.01, 0.1, ("coverage",)), 4)
    assert broken.reason == "audit" and broken.rate == pytest.approx(variance_rate(4.0, 8, 1))
    assert broken.rate > base.rate
    assert starved.reason == "starved" and starved.rate == pytest.approx(base.rate + 1.0) and starved.groups >= 1


def test_the_whole_group_form_and_the_fixed_rule_ignore_a_carry():
    state = RuleInputs(True, 0.05, 0.1, carry=0.9)
    assert decide("adaptive", 8, 0.1, 1, 4.0, state) == decide("adaptive", 8, 0.1, 1, 4.0, RuleInputs(True, 0.05, 0.1))
    assert decide("fixed", 8, 0.1, 1, 4.0, state, 4).groups == 1
    assert decide("adaptive", 8, 0.1, 1, 4.0, state).rate is None


@pytest.mark.parametrize("overrides,message", [
    (["algorithm.anchor_max_gap=4"],
     r"algorithm\.anchor_max_gap=4 is not allowed with algorithm\.anchor_rule='fixed'.*allowed: 0 with"),
    (["algorithm.anchor_rule=adaptive", "algorithm.min_anchor_groups=0"],
     (r"algorithm\.min_anchor_groups=0 is not allowed .*allowed: >= 1, or 0 with algorithm\.anchor_rule=adaptive "
      r"and algorithm\.anchor_max_gap >= 1")),
    (["algorithm.anchor_rule=adaptive", "algorithm.anchor_max_gap=4", "algorithm.min_anchor_groups=0",
      "algorithm.groups_per_step=4"], r"round\(anchor_frac \* groups_per_step\) = 0"),
    (["algorithm.anchor_rule=adaptive", "algorithm.anchor_max_gap=-1"], r"algorithm\.anchor_max_gap=-1 is out of range"),
])
def test_the_rate_forms_settings_are_checked_at_load_naming_the_keys(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


def test_min_anchor_groups_zero_loads_with_the_rate_form():
    alg = load_config(None, ["algorithm.anchor_rule=adaptive", "algorithm.anchor_max_gap=4",
                             "algorithm.min_anchor_groups=0"]).algorithm
    assert (alg.anchor_max_gap, alg.min_anchor_groups) == (4, 0)
    assert load_config(None, []).algorithm.anchor_max_gap == 0  # off by default


RATE = ["algorithm.groups_per_step=10", "algorithm.group_size=4", "algorithm.anchor_frac=0.1",
        "algorithm.min_pairs=24", "algorithm.refit_every=24", "algorithm.eta_window=24",
        "algorithm.anchor_rule=adaptive", "algorithm.anchor_max_gap=3", "algorithm.min_anchor_groups=0"]


class ShellRun:
    """A loop shell stepping the simulator's parts; the parts stay in memory across a shell's restart."""

    def __init__(self, directory: Path, *extra: str) -> None:
        cfg = load_config(None, [*RATE, *extra])
        self.alg, self.directory = cfg.algorithm, directory
        self.shell = LoopShell(cfg.algorithm, directory)
        self.rng = np.random.default_rng(0)
        self.parts = simulated_parts(cfg.simulator, 0, self.rng)
        self.planned: list[int] = []
        self.step_no = 0

    def run(self, steps: int) -> None:
        p = self.parts
        for _ in range(steps):
            p.world_model.step = self.step_no
            self.planned.append(self.shell.plan()[1].groups)
            done, _ = self.shell.step(self.step_no, task_pool=p.task_ids, policy=p.agent, executed_env=p.execution,
                                      world_model_env=p.world_model, learner=p.learner, rng=self.rng)
            assert int(done.anchor.sum()) == self.planned[-1]
            self.step_no += 1


def test_steps_without_anchor_groups_run_and_the_gap_holds(tmp_path):
    run = ShellRun(tmp_path)
    run.run(40)
    after = run.planned[8:]  # warm-up: 24 pairs = 6 groups of 4, one a step
    assert run.planned[:6] == [1] * 6 and 0 in after
    assert all(sum(run.planned[i:i + 3]) >= 1 for i in range(len(run.planned) - 2))


def test_a_run_stopped_and_resumed_plans_the_same_anchor_counts_as_one_that_was_not(tmp_path):
    whole = ShellRun(tmp_path / "whole")
    whole.run(36)
    stopped = ShellRun(tmp_path / "stopped")
    stopped.run(20)
    assert stopped.shell.calibrator.anchor_carry > 0.0  # the carry matters at the stop
    stopped.shell.snapshot_dirs()  # what the coordinator does at every step boundary
    copy = tmp_path / "checkpoint"
    shutil.copytree(tmp_path / "stopped", copy)
    carry = stopped.shell.calibrator.anchor_carry
    stopped.shell = LoopShell(stopped.alg, copy, resume=True)  # the calibration restored from its files
    assert stopped.shell.calibrator.anchor_carry == carry
    stopped.run(16)
    assert stopped.planned == whole.planned


def test_a_rewind_to_the_checkpointed_step_restores_the_carry_of_that_step(tmp_path):
    run = ShellRun(tmp_path)
    run.run(20)
    run.shell.snapshot_dirs()
    carry = run.shell.calibrator.anchor_carry
    plan = run.shell.plan()[1]
    run.shell.rewind(20)  # as the LLM trainer does after loading a checkpoint of step 20
    assert run.shell.calibrator.anchor_carry == carry and run.shell.plan()[1] == plan


@pytest.mark.parametrize("rule", [["algorithm.anchor_rule=fixed", "algorithm.min_anchor_groups=1",
                                   "algorithm.anchor_max_gap=0"],
                                  ["algorithm.anchor_max_gap=0", "algorithm.min_anchor_groups=1"]])
def test_the_fixed_rule_and_whole_groups_save_no_carry(tmp_path, rule):
    from wmrl.io import read_json

    run = ShellRun(tmp_path, *rule)
    run.run(10)
    run.shell.calibrator.save()
    state = read_json(tmp_path / "calibrator.json")
    assert "anchor_carry" not in state and set(state["anchor"]) == {"groups", "reason", "detail", "groups_per_step"}


def test_metrics_and_progress_show_the_steps_fraction_the_rate_and_why(tmp_path):
    run = ShellRun(tmp_path)
    run.run(20)
    snap, progress = run.shell.calibrator.snapshot(), run.shell.progress()
    last = run.shell.last_decision
    assert snap["anchor/frac"] == run.planned[-1] / 10 == progress["anchor_frac"]
    assert snap["anchor/rate"] == pytest.approx(last.rate / 10)
    assert f"rate {last.rate:.2f} per step" in progress["anchor_reason"]


def test_the_pair_log_replay_moves_the_carry_as_the_run_did(tmp_path):
    run = ShellRun(tmp_path)
    run.run(40)
    replayed = [s.groups for s in replay(run.alg, tmp_path, 40)]
    assert np.mean([a == b for a, b in zip(replayed, run.planned)]) >= 0.9


@pytest.mark.timeout(300)
def test_a_coordinator_run_stopped_by_sigterm_resumes_the_carry_and_ends_identical(tmp_path):
    """The anchored trainer under the coordinator (real workers): a rate-form run stopped mid-way and
    restarted from its checkpoint logs the same anchor counts and ends at the same digest."""

    rate = ["algorithm.anchor_rule=adaptive", "algorithm.anchor_max_gap=2", "algorithm.min_anchor_groups=0"]
    whole = make_run(dry_config(tmp_path / "whole", "whole", 10, *rate))
    assert Coordinator(str(whole.path))()["state"] == "finished"
    stopped = make_run(dry_config(tmp_path / "stopped", "stopped", 10, *rate))
    proc = spawn_coordinator(stopped)
    wait_until("step 5", lambda: progress_step(stopped) >= 5, 120)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) != 0
    Coordinator(str(stopped.path))()

    resumed = events(stopped, "resumed")[-1]
    assert resumed["digest"] == resumed["checkpoint_digest"]  # the carry re-serialises to the same bytes
    counts = [[m["anchor_groups"] for m in iter_metrics(run)] for run in (whole, stopped)]
    assert counts[0] == counts[1] and 0.0 in counts[0]
    assert final_digest(stopped) == final_digest(whole)
