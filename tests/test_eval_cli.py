"""`wmrl eval`: a run's checkpoint scored by the same evaluation code as `wmrl train` gives the run's own
numbers (same seed, k, tasks), to a table and a JSON file, with progress lines."""

from __future__ import annotations

import json

import pytest
from train_support import wmrl

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def test_eval_of_a_runs_final_checkpoint_gives_the_runs_final_evaluation(micro_run, tmp_path):
    evals = [json.loads(line) for line in (micro_run / "evals.jsonl").read_text().splitlines()]
    after = next(e for e in evals if e["label"] == "after")
    out = tmp_path / "eval.json"
    done = wmrl("eval", str(micro_run), "--pool", after["split"], "--k", str(after["k"]), "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    mine = json.loads(out.read_text())
    assert (mine["step"], mine["k"], mine["split"]) == (after["step"], after["k"], after["split"])
    assert [(t["task_id"], t["scores"], t["failed"]) for t in mine["tasks"]] == \
        [(t["task_id"], t["scores"], t["failed"]) for t in after["tasks"]]
    assert mine["score"] == pytest.approx(after["score"]) and mine["valid_rate"] == pytest.approx(after["valid_rate"])
    assert "| **overall** (mean over categories) |" in done.stdout
    assert "trajectories, every submission executed" in done.stderr and "eval: done in" in done.stderr


def test_eval_of_an_exported_model_repeats_the_runs_final_evaluation(micro_run, tmp_path):
    after = next(e for e in map(json.loads, (micro_run / "evals.jsonl").read_text().splitlines())
                 if e["label"] == "after")
    exported = tmp_path / "exported"
    assert wmrl("export", str(micro_run), str(exported)).returncode == 0
    assert json.loads((exported / "wmrl_export.json").read_text())["step"] == after["step"]
    out = tmp_path / "model-eval.json"
    # The run's own config (seed, sampling, tasks) with the exported weights; the step comes from the export.
    done = wmrl("eval", str(exported), str(micro_run / "config.yaml"), "--pool", after["split"],
                "--k", str(after["k"]), "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    mine = json.loads(out.read_text())
    assert mine["step"] == after["step"]
    assert [(t["task_id"], t["scores"]) for t in mine["tasks"]] == [(t["task_id"], t["scores"]) for t in after["tasks"]]


def test_train_logs_evaluation_progress_before_the_first_step(micro_run):
    log = (micro_run / "logs" / "coordinator.log").read_text()
    start = log.index("evaluation before (train): 1 tasks x k=1 = 1 trajectories, every submission executed")
    assert start < log.index("evaluation before (train): done in") < log.index("evaluation after (train):")


def test_eval_refuses_a_directory_that_is_neither_a_model_nor_a_run(tmp_path):
    done = wmrl("eval", str(tmp_path / "nothing"))
    assert done.returncode == 2 and "MODEL_OR_RUN" in done.stderr
