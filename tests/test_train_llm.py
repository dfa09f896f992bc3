"""`wmrl train`: the LLM trainer end to end on a micro model (real CLI, real workers, real DeepSpeed on the
CPU, real MLflow store), and exact resume after a SIGKILL mid-step. The micro model and the finished
uninterrupted run are the session fixtures ``micro_model`` and ``micro_run`` (conftest.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from launch_support import progress_step, wait_until
from train_support import (
    REPO,
    cli_env,
    coordinator_events,
    learner_weights,
    metrics_rows,
    micro_overrides,
    same_weights,
    sampled_tokens,
    wmrl,
)

from wmrl.storage.rundir import RunDir

# the session's micro run (a few minutes; more on a loaded machine) is set up inside the first test
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def test_train_runs_every_step_and_logs_learner_and_calibration_metrics(micro_run):
    rows = metrics_rows(micro_run)
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert r["dropped_groups"] == 0 and "learner/seconds" in r  # every group reached the learner
        assert r["seconds_generation"] > 0 and r["tokens_generation"] > 0
        assert r["rho"] >= 1.0
        # the trainer process's CPU over the step (generation, update: the micro model's torch work)
        assert r["cpu_seconds_learner"] > 0
        assert r["cpu_hours"] == pytest.approx((r["cpu_seconds_learner"] + r["cpu_seconds_execution"]) / 3600)
    # the audit at the end of warm-up (4 pairs after step 2): its verdict and its two numbers, as the
    # anchored trainer logs them (null: too few pairs to measure them)
    audited = [r for r in rows if "audit_ok" in r]
    assert [r["step"] for r in audited] == [2]
    assert {"audit_monotonicity_gain", "audit_stationarity_gap"} <= set(audited[0])
    progress = json.loads((micro_run / "progress.json").read_text())
    assert progress["state"] == "finished" and progress["cost_source"] == "measured"
    assert progress["cpu_hours"] == rows[-1]["cpu_hours"]


def test_the_run_holds_the_executed_solution_memory(micro_run):
    # The micro model writes no code block, so nothing reaches the memory or the world model here; what it
    # learns from anchors is tested on real rollout objects (test_world_model_memory.py), and the resume
    # test below rebuilds it from the run's log.
    rows = metrics_rows(micro_run)
    assert all(r["world_model/memory_solutions"] > 500 for r in rows)  # the references and SFT variants


def test_train_evaluates_before_and_after_with_real_execution(micro_run):
    evals = [json.loads(line) for line in (micro_run / "evals.jsonl").read_text().splitlines()]
    assert [(e["label"], e["split"], e["step"]) for e in evals] == [("before", "train", 0), ("after", "train", 2)]
    assert all(len(e["tasks"]) == 1 and e["k"] == 1 for e in evals)
    assert "eval/train/score" in metrics_rows(micro_run)[-1]


def test_train_writes_rollouts_whose_tokens_are_the_turn_concatenation(micro_run):
    from wmrl.agent.records import read_rollouts

    _, groups = read_rollouts(micro_run, 1)
    assert len(groups) == 2 and all(len(g) == 2 for g in groups)
    for traj in (t for g in groups for t in g):
        ids, mask = traj.token_ids(), traj.loss_mask()
        assert len(ids) == len(mask) == sum(len(t.prompt_ids) + len(t.generated_ids) for t in traj.turns)
        assert sum(mask) == sum(len(t.generated_ids) for t in traj.turns) > 0


def test_train_keeps_learner_checkpoints_that_export_loads(micro_run, tmp_path):
    from transformers import AutoModelForCausalLM

    out = tmp_path / "exported"
    done = subprocess.run([sys.executable, "-m", "wmrl.cli.main", "export", str(micro_run), str(out)],
                          cwd=REPO, env=cli_env(), capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    model = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    assert sum(p.numel() for p in model.parameters()) > 0


def test_train_refuses_a_config_of_another_trainer(tmp_path):
    done = wmrl("train", str(REPO / "configs" / "e2e-local.yaml"))
    assert done.returncode == 2 and "trains an agent from an initial policy (trainer: llm)" in done.stderr


def test_sigkill_mid_step_resumes_at_the_checkpoint_with_identical_tokens_and_weights(
        micro_run, micro_model, tmp_path):
    """Run B is SIGKILLed during step 2 and relaunched; its step-2 samples and weights equal run A's."""
    args = micro_overrides(tmp_path, micro_model, "killed")
    run = tmp_path / "killed"
    first = wmrl("train", *args, wait=False)
    try:
        # progress.json is written after the step's checkpoint (metrics.jsonl before it: a kill between
        # the two would resume at step 0)
        wait_until("step 1 to be checkpointed", lambda: progress_step(RunDir(run)) >= 1, timeout_s=600)
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # coordinator and its local workers, mid-step 2 at the latest
        first.wait()
    again = wmrl("train", *args)
    assert again.returncode == 0, again.stdout + again.stderr
    resumed = coordinator_events(run, "resumed")
    assert resumed and resumed[-1]["identical"] and resumed[-1]["checkpoint_step"] >= 1
    assert sampled_tokens(run, 1) == sampled_tokens(micro_run, 1)
    assert same_weights(learner_weights(micro_run, 2), learner_weights(run, 2))

