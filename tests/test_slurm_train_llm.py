"""The LLM trainer through the coordinator on the real local Slurm: `wmrl launch` (submitit coordinator
job + worker array) of the micro config, `scontrol requeue` of the coordinator mid-run, and the resumed
job continues exactly where an uninterrupted run (``micro_run``, same seed) went."""

from __future__ import annotations

import pytest
from launch_support import require_slurm
from train_support import (
    coordinator_events,
    launch_and_requeue,
    learner_weights,
    same_weights,
    sampled_tokens,
)

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.timeout(1800)]
SLURM = ["launch.executor=slurm", "launch.timing.coordinator_time_min=15", "launch.timing.worker_time_min=15",
         "launch.timing.checkpoint_margin_s=60"]


def test_llm_coordinator_requeued_with_scontrol_resumes_with_identical_tokens_and_weights(
        micro_run, micro_model, tmp_path):
    require_slurm()
    run = launch_and_requeue(tmp_path, micro_model, "requeued", SLURM)
    terminated, resumed = coordinator_events(run, "terminated")[-1], coordinator_events(run, "resumed")[-1]
    assert terminated["step"] == 1 and resumed["restart_count"] == "1"
    assert resumed["checkpoint_step"] == 1 and resumed["identical"] is True
    assert sampled_tokens(run, 1) == sampled_tokens(micro_run, 1)  # the step after the checkpoint
    assert same_weights(learner_weights(micro_run, 2), learner_weights(run, 2))
