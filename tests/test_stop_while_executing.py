"""SIGTERM (scancel, requeue, preemption) or submitit's SIGUSR2 while a step waits on executions: the agent
waits in a worker thread (AgentPolicy runs the executed and the world-model environment concurrently),
which the handler's SystemExit cannot interrupt, and leaving the thread pool joins it. The coordinator
must still exit within seconds, well inside Slurm's KillWait (30 s by default), not when the executions
end (the deadline of a batch: hours with a cluster's sandbox limits), after which SIGKILL would skip its
cleanup (the run lock, the workers, MLflow).

The child process below is the coordinator's waiting part, real: a run directory's spool with no worker
(the executions never end), the AnchorRunner and ExecutedEnvironment the LLM trainer uses, the agent's
multi-turn loop (a scripted generator writes the code), and the Coordinator's own signal handler."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from launch_support import REPO, dry_config, make_run, wait_until

from wmrl.orchestration.anchors import AnchorRunner, CoordinatorStopping
from wmrl.storage.rundir import RunDir

pytestmark = pytest.mark.timeout(180)

KILL_WAIT_S = 30.0  # Slurm's default KillWait: what a coordinator has between SIGTERM and SIGKILL
SANDBOX_S = 3600.0  # one execution's limit: the batch's deadline is several times this


def waiting_coordinator(run_dir: str) -> None:
    """The child: a coordinator whose step waits on executions that never end."""
    import numpy as np
    from agent_support import ScriptedGenerator
    from test_agent_policy import OVERVIEWS, ScoreEnv, code_reply, policy

    from wmrl.config import load_config
    from wmrl.execution.executed import ExecutedEnvironment
    from wmrl.execution.service import SpoolExecutionService
    from wmrl.orchestration.coordinator import Coordinator, LiveRun
    from wmrl.storage.checkpoint import CheckpointStore

    run = RunDir.open(run_dir)
    cfg = load_config(run.config_path)
    runner = AnchorRunner(run, cfg, SpoolExecutionService(run, cfg.launch))
    coordinator = Coordinator(run_dir)
    coordinator._live = LiveRun(run, CheckpointStore(run.path / "checkpoints"), anchors=runner)
    signal.signal(signal.SIGTERM, coordinator.stop_on_signal)
    executed = ExecutedEnvironment(runner, run.run_id, SANDBOX_S, cfg.launch)
    agent = policy(ScriptedGenerator(lambda ids, call: code_reply(call)))
    agent.rollout(0, list(OVERVIEWS), 2, [executed, ScoreEnv()], np.random.default_rng(0))


def test_sigterm_while_the_agent_waits_on_executions_exits_within_kill_wait(tmp_path: Path):
    run = make_run(dry_config(tmp_path, "waiting", 4))
    code = ("import sys; sys.path.insert(0, 'tests'); from test_stop_while_executing import waiting_coordinator; "
            "waiting_coordinator(sys.argv[1])")
    proc = subprocess.Popen([sys.executable, "-c", code, str(run.path)], cwd=REPO, stderr=subprocess.PIPE, text=True)
    try:
        wait_until("the agent's executions queued", lambda: any(run.queue.glob("*.json")), 120, every_s=0.2)
        time.sleep(1.0)  # inside the wait on the spool
        signalled = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=KILL_WAIT_S)  # TimeoutExpired: it waited on the executions
        took = time.monotonic() - signalled
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rc == 128 + signal.SIGTERM, proc.stderr.read()[-2000:] if proc.stderr else rc
    assert took < 20.0  # one slice of the wait (5 s) and the exit, well within KillWait; not the batch's deadline
    assert len(list(run.queue.glob("*.json"))) == 2  # still queued: the resumed step finds their results


def test_a_stopped_runner_submits_nothing_and_the_coordinator_stops_it_on_submitit_checkpoint(tmp_path: Path):
    from wmrl.execution.service import SpoolExecutionService
    from wmrl.orchestration.coordinator import Coordinator, LiveRun
    from wmrl.storage.checkpoint import CheckpointStore
    from wmrl.storage.records import ExecutionRequest

    cfg = dry_config(tmp_path, "requeued", 4)
    run = make_run(cfg)
    runner = AnchorRunner(run, cfg, SpoolExecutionService(run, cfg.launch))
    coordinator = Coordinator(str(run.path))
    coordinator._live = LiveRun(run, CheckpointStore(run.path / "checkpoints"), anchors=runner)

    coordinator.checkpoint()  # what submitit calls on SIGUSR2, before its sys.exit

    assert runner.stopping
    request = ExecutionRequest.create(run.run_id, 0, "t", 0, 0, "print(1)", 60.0, 0)
    with pytest.raises(CoordinatorStopping, match="not submitted"):
        runner.execute([request], 60.0)
    assert not any(run.queue.glob("*.json"))
