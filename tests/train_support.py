"""Shared pieces of the LLM-trainer tests (``wmrl train`` locally, ``wmrl launch`` on the local Slurm):
the micro run's config overrides, the CLI child's environment, and readers of what a run leaves
(metrics rows, the sampled token ids of a step, the learner's weights). The micro model and the
uninterrupted reference run are the session fixtures ``micro_model`` and ``micro_run`` (conftest.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]


def micro_overrides(root: Path, model: Path, name: str, steps: int = 2) -> list[str]:
    return [
        f"run_name={name}", f"runs_root={root}", f"model.path={model}", f"tracking.uri=sqlite:///{root}/mlflow.db",
        "algorithm.groups_per_step=2", "algorithm.group_size=2", "algorithm.anchor_frac=0.5",
        "algorithm.min_pairs=4", "algorithm.refit_every=2", "algorithm.eta_window=4",
        "agent.prompt_style=short", "world_model.prompt_style=short", "agent.max_turns=2", "agent.observation_tokens=32", "sampling.max_new_tokens=12",
        "world_model.max_new_tokens=8", "world_model.checks=[imports,submission,quality]",
        # the executed-solution memory answers the quality check and learns the anchors: the resume test
        # then also checks that a resumed run rebuilds it exactly (identical weights after step 2)
        "world_model.memory=true", "world_model.sft_variants_per_task=1", "world_model.memory_policy_samples=2",
        "learner.lr=1e-3", "learner.micro_batch_size=2", "learner.kl_coef=0.04",
        f"train.steps={steps}", "train.eval_k=1", "train.eval_tasks=1", "train.eval_split=train",
        "sandbox.timeout_s=30", "launch.workers=1", "launch.timing.lease_s=10", "launch.timing.heartbeat_s=1",
        "launch.timing.lock_stale_s=6", "launch.timing.lock_heartbeat_s=2", "launch.timing.idle_timeout_s=60",
        "launch.timing.checkpoint_every_s=0.001",  # a coordinator checkpoint after every step: a kill resumes at 1
    ]


def cli_env() -> dict[str, str]:
    # Handed down whole: a learner test earlier in this pytest process may have left RANK/WORLD_SIZE/
    # MASTER_PORT here (its store still listening), and the lone learner of the child must cope.
    return {**os.environ, "PYTHONPATH": str(REPO)}


def wmrl(command: str, *args: str, wait: bool = True) -> subprocess.Popen | subprocess.CompletedProcess:
    """``wmrl COMMAND ARGS`` as a child process (``wait=False``: its own session, to kill it whole)."""
    cmd = [sys.executable, "-m", "wmrl.cli.main", command, *args]
    if wait:
        return subprocess.run(cmd, cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=1500, check=False)
    return subprocess.Popen(cmd, cwd=REPO, env=cli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def metrics_rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def coordinator_events(run: Path, name: str) -> list[dict]:
    lines = (run / "logs" / "coordinator-events.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["event"] == name]


def sampled_tokens(run: Path, step: int) -> list[list[int]]:
    from wmrl.agent.records import read_rollouts

    _, groups = read_rollouts(run, step)
    return [t.token_ids() for g in groups for t in g]


def learner_weights(run: Path, step: int) -> dict[str, torch.Tensor]:
    from wmrl.learner.export import consolidated_state_dict, find_checkpoint

    return consolidated_state_dict(find_checkpoint(run, step))


def same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def launch_and_requeue(root: Path, model: Path, name: str, overrides: list[str], timeout_s: float = 600,
                       at_step_1: Callable[[dict[str, str]], None] | None = None, requeue: bool = True) -> Path:
    """``wmrl launch`` of the micro run on the local Slurm, ``scontrol requeue`` of its coordinator once
    step 1 is done (``at_step_1(jobs)`` first; ``requeue=False``: the uninterrupted run), then wait for
    the end; returns the run directory."""
    from launch_support import progress_step, squeue_gone, wait_until

    from wmrl.configs import TINY_CONFIG
    from wmrl.slurm.client import cancel_jobs, load_jobs
    from wmrl.storage.rundir import RunDir

    launched = wmrl("launch", str(TINY_CONFIG), *micro_overrides(root, model, name), *overrides)
    assert launched.returncode == 0, launched.stdout + launched.stderr
    run = RunDir(root / name)
    jobs = {r.kind: r.job_id for r in load_jobs(run)}
    try:
        wait_until("step 1", lambda: progress_step(run) >= 1, timeout_s, every_s=0.5)
        if at_step_1 is not None:
            at_step_1(jobs)
        if requeue:  # scontrol requeue (SIGTERM to the coordinator, mid-step 2), then StartTime=now
            subprocess.run([str(REPO / "slurm" / "requeue-now.sh"), jobs["coordinator"]], check=True, timeout=90)
        wait_until("the run to finish", run.is_ended, timeout_s, every_s=1)
    finally:
        run.mark_ended("test over")
        wait_until("the jobs to leave the queue", lambda: all(squeue_gone(j) for j in jobs.values()), 180)
        cancel_jobs(list(jobs.values()))
    assert run.ended_reason() == "finished"
    return run.path
