"""Measured CPU time beside the wall seconds (``RunTotals.cpu_seconds``, the metric ``cpu_hours``): the
executed programs' CPU from their sandbox (or ``python_work``'s child), the trainer process's over its
steps, none for a reused outcome; what a run costs on a core, whatever else shares the machine."""

from __future__ import annotations

import pytest

from wmrl.config import LaunchConfig
from wmrl.execution.executed import ExecutedEnvironment
from wmrl.execution.work import python_work
from wmrl.rollout import Submission
from wmrl.storage.records import ExecutionOutcomeRecord, ExecutionRequest
from wmrl.trainers.common import RunTotals

SPIN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5:\n    pass\nprint(1)"
SLEEP = "import time\ntime.sleep(1.0)\nprint(1)"


def _request(code: str) -> ExecutionRequest:
    return ExecutionRequest.create("run1", 0, "task-a", 0, 0, code, 20.0, 0)


def test_python_work_measures_the_programs_cpu_not_its_wall_time():
    work = python_work(None)  # type: ignore[arg-type]  # the run is not read
    spin, sleep = work(_request(SPIN)), work(_request(SLEEP))
    assert spin["cpu_seconds"] >= 0.45  # busy for 0.5 s of CPU
    assert sleep["wall_seconds"] >= 1.0 and sleep["cpu_seconds"] < 0.5  # a second of wall, little CPU


class Runner:
    """Answers every request at once with the sandbox's measured CPU in the outcome, as real_work does."""

    def __init__(self) -> None:
        self.seen: list[ExecutionRequest] = []

    def execute(self, requests, timeout_s):
        self.seen += requests
        return {r.request_id: ExecutionOutcomeRecord(
            r.request_id, r.run_id, "done", 0.5, {"result": {"status": "ok", "cpu_seconds": 3.0}, "feedback": "ok"},
            "w0", 1, 0.0, 7.0, 7.0) for r in requests}


def test_an_execution_carries_its_sandbox_cpu_and_a_reused_outcome_costs_none():
    subs = [Submission(f"3/0/{i}/1", "task-a", "print(0.5)") for i in range(3)]
    env = ExecutedEnvironment(runner := Runner(), "run1", 20.0, LaunchConfig(reuse_executions=True))
    feedback = env.evaluate(subs)
    assert len(runner.seen) == 1
    assert [fb.cpu_seconds for fb in feedback] == [3.0, 0.0, 0.0]
    assert [fb.seconds for fb in feedback] == [7.0, 0.0, 0.0]


def test_run_totals_add_the_learners_and_the_executions_cpu_and_read_older_checkpoints():
    from types import SimpleNamespace

    totals = RunTotals()
    step = SimpleNamespace(seconds={"generation": 10.0}, tokens={}, executions=2, failed_executions=0,
                           reused_executions=0, wm_calls=0, execution_cpu_seconds=4.0)
    totals.charge(step, learner_cpu_seconds=8.0)  # type: ignore[arg-type]
    totals.charge(step, learner_cpu_seconds=6.0)  # type: ignore[arg-type]
    assert totals.cpu_seconds == {"learner": 14.0, "execution": 8.0}
    metrics = totals.as_metrics()
    assert metrics["cpu_hours"] == pytest.approx(22.0 / 3600) and metrics["cpu_seconds_execution"] == 8.0
    assert metrics["compute_hours"] == pytest.approx(20.0 / 3600)  # the wall seconds stay what they were
    assert RunTotals.from_dict(totals.to_dict()) == totals
    old = {k: v for k, v in totals.to_dict().items() if k != "cpu_seconds"}  # a checkpoint from before
    assert RunTotals.from_dict(old).cpu_seconds == {"learner": 0.0, "execution": 0.0}


@pytest.mark.timeout(180)
def test_a_coordinators_run_reports_its_cpu_hours(tmp_path):
    """The anchored trainer with real workers running real programs: each step's metrics carry the
    trainer process's and the executed programs' CPU so far, and cpu_hours is their sum."""
    from launch_support import dry_config, make_run

    from wmrl.orchestration.coordinator import Coordinator, iter_metrics

    run = make_run(dry_config(tmp_path, "cpu", 3))
    assert Coordinator(str(run.path))()["state"] == "finished"
    metrics = list(iter_metrics(run))
    learner = [m["cpu_seconds_learner"] for m in metrics]
    execution = [m["cpu_seconds_execution"] for m in metrics]
    assert learner == sorted(learner) and learner[0] > 0  # running totals
    assert execution == sorted(execution) and execution[-1] > 0  # python_work's programs used CPU
    assert metrics[-1]["cpu_hours"] == pytest.approx((learner[-1] + execution[-1]) / 3600)
    from wmrl.cli.status import collect, render

    (line,) = [x for x in render(collect(run)).splitlines() if x.startswith("compute")]
    assert "; CPU time " in line and "executed programs" in line  # `wmrl status` shows it beside the wall time


def test_a_state_digest_leaves_the_measured_seconds_out():
    """Two runs of one config share their counts, never their measured wall or CPU seconds: a digest that
    read them would call bit-identical runs different (the Slurm requeue test compares digests)."""
    a, b = RunTotals(executions=3), RunTotals(executions=3)
    a.seconds["execution"], a.cpu_seconds["execution"] = 7.0, 3.0
    assert RunTotals.counted(a.to_dict()) == RunTotals.counted(b.to_dict())
    assert RunTotals.counted(a.to_dict())["executions"] == 3
