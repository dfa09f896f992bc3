"""The LLM trainer with a 2-task coordinator on the real local Slurm: `wmrl launch` (submitit, 2 tasks)
of the micro config at ZeRO-3; rank 0 runs the coordinator, rank 1 follows its learner calls
(wmrl/learner/follower.py); `scontrol requeue` mid-run restarts both tasks and the run resumes from
the learner checkpoint rank 0 chooses, exactly where an uninterrupted 2-task run of the same seed went."""

from __future__ import annotations

import json
import subprocess

import pytest
import torch
from launch_support import require_slurm
from train_support import (
    coordinator_events,
    launch_and_requeue,
    learner_weights,
    same_weights,
    sampled_tokens,
)

from wmrl.learner.export import find_checkpoint

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.timeout(1800)]
TWO_RANKS = ["launch.executor=slurm", "launch.timing.coordinator_time_min=15", "launch.timing.worker_time_min=15",
             "launch.timing.checkpoint_margin_s=60", "launch.coordinator_tasks_per_node=2", "launch.coordinator_cpus=1",
             "learner.zero_stage=3", "learner.zero3_persistence_threshold=0"]


def test_two_task_coordinator_trains_with_both_ranks_and_resumes_after_scontrol_requeue(
        micro_run, micro_model, tmp_path):
    require_slurm()

    def two_tasks(jobs: dict[str, str]) -> None:
        shown = subprocess.run(["scontrol", "show", "job", "-o", jobs["coordinator"]], capture_output=True,
                               text=True, check=True).stdout
        assert "NumTasks=2" in shown

    uninterrupted = launch_and_requeue(tmp_path, micro_model, "ranks-whole", TWO_RANKS, timeout_s=900, requeue=False)
    assert not coordinator_events(uninterrupted, "resumed")
    run = launch_and_requeue(tmp_path, micro_model, "ranks", TWO_RANKS, timeout_s=900, at_step_1=two_tasks)
    terminated, resumed = coordinator_events(run, "terminated")[-1], coordinator_events(run, "resumed")[-1]
    assert terminated["step"] == 1 and resumed["restart_count"] == "1"
    assert resumed["checkpoint_step"] == 1 and resumed["identical"] is True
    last = find_checkpoint(run)
    meta = json.loads((last / "learner.json").read_text())
    assert meta["world_size"] == 2 and meta["zero_stage"] == 3 and meta["step"] == 2
    # each rank wrote its own optimizer partition and RNG: both ranks were in every update
    assert len(list(last.glob("*zero_pp_rank_*optim_states.pt"))) == 2
    assert sorted(p.name for p in last.glob("rng-rank-*")) == ["rng-rank-00000.pt", "rng-rank-00001.pt"]
    # both ranks learned: every parameter moved in the resumed step
    before, ours = learner_weights(run, 1), learner_weights(run, 2)
    for name in ours:
        assert (ours[name] - before[name]).abs().max() > 0, name
    # the resumed run is the uninterrupted one: the tokens of the step after the checkpoint, and the
    # weights after it, bit for bit
    assert sampled_tokens(run, 1) == sampled_tokens(uninterrupted, 1)
    assert same_weights(learner_weights(uninterrupted, 2), ours)
    # and rank 0 drives generation as one rank does: the first step's tokens are the one-rank run's,
    # the weights its weights up to the reduction order of 2 ranks (Adam at lr 1e-3: < 1e-2 apart)
    assert sampled_tokens(run, 0) == sampled_tokens(micro_run, 0)
    one_rank = learner_weights(micro_run, 2)
    assert ours.keys() == one_rank.keys()
    assert all(torch.allclose(ours[name], one_rank[name], atol=1e-2) for name in ours)


def test_two_task_coordinator_generates_data_parallel_with_an_engine_on_each_rank(micro_model, tmp_path):
    """generation.data_parallel: rank 1 holds an engine too and draws its share of every generate call
    (the colocated vLLM placement's path with several ranks); the run finishes only if rank 1 met every
    call, its gather and its weight syncs in order."""
    require_slurm()
    run = launch_and_requeue(tmp_path, micro_model, "ranks-dp", [*TWO_RANKS, "generation.data_parallel=true"],
                             timeout_s=900, requeue=False)
    last = find_checkpoint(run)
    assert json.loads((last / "learner.json").read_text())["world_size"] == 2
    for step in (0, 1):  # 2 groups x 2 trajectories a step, drawn by the two ranks
        assert len(sampled_tokens(run, step)) == 4
