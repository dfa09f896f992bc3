"""scripts/execution_repeats.py: repeated executions in a run's rollout records, and the CPU-hours a
content cache would have spent (the first execution of each code kept, the repeats' share of each
step's execution phase removed)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from script_support import load_script


def _script():
    return load_script("execution_repeats")


def _step(run: Path, step: int, trajectories: list[tuple[str, str, str, float, float]]) -> None:
    """Rollout records of one step: (role, task, code, score, execution seconds) per trajectory."""
    (run / "rollouts").mkdir(parents=True, exist_ok=True)
    lines = [{"format": "wmrl-rollouts-v1", "step": step}]
    lines += [{"step": step, "task_id": task, "role": role, "final_code": code, "score": score,
               "seconds": {"execution": seconds} if role == "executed" else {}}
              for role, task, code, score, seconds in trajectories]
    with gzip.open(run / "rollouts" / f"step-{step:06d}.jsonl.gz", "wt") as f:
        f.write("".join(json.dumps(line) + "\n" for line in lines))


def test_repeats_and_what_a_content_cache_would_have_spent(tmp_path: Path):
    run = tmp_path / "grpo_real_s0"
    _step(run, 0, [("executed", "t", "a", 0.5, 10.0), ("executed", "t", "a", 0.5, 10.0),
                   ("executed", "u", "a", 0.0, 20.0), ("world_model", "t", "z", 0.9, 0.0)])
    _step(run, 1, [("executed", "t", "a", 0.5, 30.0), ("executed", "t", "b", 0.2, 10.0)])
    # metrics count steps from 1; step 1: 100 s, of which 20 s execution; step 2: 50 s, of which 40 s execution
    (run / "metrics.jsonl").write_text(
        json.dumps({"step": 1, "compute_hours": 100 / 3600, "step_seconds_execution": 20.0}) + "\n"
        + json.dumps({"step": 2, "compute_hours": 150 / 3600, "step_seconds_execution": 40.0}) + "\n")
    row = _script().repeats(run)
    assert (row["executions"], row["distinct"], row["codes_run_more_than_once"]) == (5, 3, 1)  # (t, a) three times
    assert row["repeated_with_differing_scores"] == 0 and row["cpu_hours"] == pytest.approx(150 / 3600)
    # step 1: first-seen 30 of 40 execution seconds -> 80 + 20 * 0.75; step 2: 10 of 40 -> 10 + 40 * 0.25
    assert row["cpu_hours_with_cache"] * 3600 == pytest.approx(95.0 + 20.0)
    # execution: 60 of 150 s measured; 15 + 10 of the cache's 115 s
    assert row["execution_share"] == pytest.approx(60 / 150)
    assert row["execution_share_with_cache"] == pytest.approx(25 / 115)


def test_a_repeated_code_whose_score_changed_is_counted(tmp_path: Path):
    run = tmp_path / "r"
    _step(run, 0, [("executed", "t", "a", 0.5, 1.0), ("executed", "t", "a", 0.4, 1.0)])
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "compute_hours": 0.001, "step_seconds_execution": 2.0}) + "\n")
    assert _script().repeats(run)["repeated_with_differing_scores"] == 1
