"""`wmrl train`: the LLM trainer end to end on a micro model (real CLI, real workers, real DeepSpeed on the
CPU, real MLflow store), and exact resume after a SIGKILL mid-step."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.launch_support import wait_until
from tests.models_support import build_tiny

REPO = Path(__file__).resolve().parents[1]


def micro_overrides(root: Path, model: Path, name: str, steps: int = 2) -> list[str]:
    return [
        f"run_name={name}", f"runs_root={root}", f"model.path={model}", f"tracking.uri=sqlite:///{root}/mlflow.db",
        "algorithm.groups_per_step=2", "algorithm.group_size=2", "algorithm.anchor_frac=0.5",
        "algorithm.min_pairs=4", "algorithm.refit_every=2", "algorithm.eta_window=4",
        "agent.prompt_style=short", "world_model.prompt_style=short", "agent.max_turns=2", "agent.observation_tokens=32", "sampling.max_new_tokens=12",
        "world_model.max_new_tokens=8", "world_model.checks=[imports,submission,quality]",
        "learner.lr=1e-3", "learner.micro_batch_size=2", "learner.kl_coef=0.04",
        f"train.steps={steps}", "train.eval_k=1", "train.eval_tasks=1", "train.eval_split=train",
        "sandbox.timeout_s=30", "launch.workers=1", "launch.lease_s=10", "launch.heartbeat_s=1",
        "launch.lock_stale_s=6", "launch.lock_heartbeat_s=2", "launch.idle_timeout_s=60",
        "launch.checkpoint_every_s=0.001",  # a coordinator checkpoint after every step: the kill test resumes at 1
    ]


def train(*args: str, wait: bool = True) -> subprocess.Popen | subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "wmrl.cli.main", "train", *args]
    # A learner test earlier in this pytest process may have set up torch.distributed here (its store
    # still listens on MASTER_PORT): the child is a lone process and must pick its own rendezvous.
    dist = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    env = {**{k: v for k, v in os.environ.items() if k not in dist}, "PYTHONPATH": str(REPO)}
    if wait:
        return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900, check=False)
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


@pytest.fixture(scope="module")
def micro_model(tmp_path_factory) -> Path:
    # A long context: with its small vocabulary the first prompt (system prompt + task overview) is a few
    # thousand tokens, and a trajectory that cannot fit its next turn stops before generating.
    return build_tiny(tmp_path_factory.mktemp("cache"), tmp_path_factory.mktemp("model") / "tiny",
                      max_position_embeddings=16384)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, micro_model) -> Path:
    root = tmp_path_factory.mktemp("runs")
    done = train(*micro_overrides(root, micro_model, "micro"))
    assert done.returncode == 0, done.stdout + done.stderr
    return root / "micro"


def metrics_rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def sampled_tokens(run: Path, step: int) -> list[list[int]]:
    from wmrl.agent.records import read_rollouts

    _, groups = read_rollouts(run, step)
    return [t.token_ids() for g in groups for t in g]


def test_train_runs_every_step_and_logs_learner_and_calibration_metrics(finished_run):
    rows = metrics_rows(finished_run)
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert r["dropped_groups"] == 0 and "learner/seconds" in r  # every group reached the learner
        assert r["seconds_generation"] > 0 and r["tokens_generation"] > 0
        assert r["rho"] >= 1.0
    progress = json.loads((finished_run / "progress.json").read_text())
    assert progress["state"] == "finished" and progress["cost_source"] == "measured"


def test_train_evaluates_before_and_after_with_real_execution(finished_run):
    evals = [json.loads(line) for line in (finished_run / "evals.jsonl").read_text().splitlines()]
    assert [(e["label"], e["split"], e["step"]) for e in evals] == [("before", "train", 0), ("after", "train", 2)]
    assert all(len(e["tasks"]) == 1 and e["k"] == 1 for e in evals)
    assert "eval/train/score" in metrics_rows(finished_run)[-1]


def test_train_writes_rollouts_whose_tokens_are_the_turn_concatenation(finished_run):
    from wmrl.agent.records import read_rollouts

    _, groups = read_rollouts(finished_run, 1)
    assert len(groups) == 2 and all(len(g) == 2 for g in groups)
    for traj in (t for g in groups for t in g):
        ids, mask = traj.token_ids(), traj.loss_mask()
        assert len(ids) == len(mask) == sum(len(t.prompt_ids) + len(t.generated_ids) for t in traj.turns)
        assert sum(mask) == sum(len(t.generated_ids) for t in traj.turns) > 0


def test_train_keeps_learner_checkpoints_that_export_loads(finished_run, tmp_path):
    from transformers import AutoModelForCausalLM

    out = tmp_path / "exported"
    done = subprocess.run([sys.executable, "-m", "wmrl.cli.main", "export", str(finished_run), str(out)],
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    model = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    assert sum(p.numel() for p in model.parameters()) > 0


def test_train_refuses_a_config_of_another_trainer(tmp_path):
    done = train(str(REPO / "configs" / "e2e-local.yaml"))
    assert done.returncode == 2 and "trains the LLM agent" in done.stderr


def _weights(run: Path, step: int) -> dict[str, torch.Tensor]:
    from wmrl.learner.export import consolidated_state_dict, find_checkpoint

    return consolidated_state_dict(find_checkpoint(run, step))


def test_sigkill_mid_step_resumes_at_the_checkpoint_with_identical_tokens_and_weights(
        finished_run, micro_model, tmp_path):
    """Run B is SIGKILLed during step 2 and relaunched; its step-2 samples and weights equal run A's."""
    root = finished_run.parent
    args = micro_overrides(root, micro_model, "killed")
    run = root / "killed"
    first = train(*args, wait=False)
    try:
        wait_until("step 1 to finish", lambda: (run / "metrics.jsonl").exists()
                   and len((run / "metrics.jsonl").read_text().splitlines()) >= 1, timeout_s=600)
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # coordinator and its local workers, mid-step 2 at the latest
        first.wait()
    again = train(*args)
    assert again.returncode == 0, again.stdout + again.stderr
    events = [json.loads(line) for line in (run / "logs" / "coordinator-events.jsonl").read_text().splitlines()]
    resumed = [e for e in events if e["event"] == "resumed"]
    assert resumed and resumed[-1]["identical"] and resumed[-1]["checkpoint_step"] >= 1
    assert sampled_tokens(run, 1) == sampled_tokens(finished_run, 1)
    wa, wb = _weights(finished_run, 2), _weights(run, 2)
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
