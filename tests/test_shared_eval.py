"""The evaluation before the first step, measured once per initial policy under one runs root
(``train.share_initial_eval``, wmrl/trainers/llm/shared_eval.py): stored, read back with who measured it,
waited for while another run measures it, never stored when incomplete; and a second real run from the
micro run's start reads the micro run's instead of executing its own."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from train_support import micro_overrides, wmrl

from wmrl.evaluation import EvalReport, TaskScore, aggregate
from wmrl.trainers.llm.shared_eval import SHARED_EVALS, shared_evaluation

INPUTS = {"policy_build": "sft-a", "split": "train", "tasks": [["t1", "tabular"]], "k": 2, "seed": 0}


def _report(failed: int = 0) -> EvalReport:
    return aggregate([TaskScore("t1", "tabular", [0.25, 0.75][: 2 - failed], failed=failed)], 2, [True, False])


def test_the_first_run_measures_and_later_runs_read_its_report(tmp_path: Path):
    calls = []

    def measure() -> EvalReport:
        calls.append(1)
        return _report()

    first, by = shared_evaluation(INPUTS, "run-a", measure, tmp_path)
    assert by is None and len(calls) == 1
    again, by = shared_evaluation(INPUTS, "run-b", measure, tmp_path)
    assert by == "run-a" and len(calls) == 1
    assert again.to_dict() == first.to_dict() and again.sample_mean == 0.5
    _, by = shared_evaluation({**INPUTS, "seed": 1}, "run-c", measure, tmp_path)  # another seed: measured
    assert by is None and len(calls) == 2


def test_an_evaluation_with_a_failed_execution_is_not_stored(tmp_path: Path):
    _, by = shared_evaluation(INPUTS, "run-a", lambda: _report(failed=1), tmp_path)
    _, by = shared_evaluation(INPUTS, "run-b", _report, tmp_path)
    assert by is None  # measured again: run-a's lacked a trajectory the infrastructure gave up on
    assert shared_evaluation(INPUTS, "run-c", _report, tmp_path)[1] == "run-b"


def test_a_run_that_starts_while_another_measures_waits_for_its_report(tmp_path: Path):
    measuring, release = threading.Event(), threading.Event()
    second_measured = []

    def slow() -> EvalReport:
        measuring.set()
        release.wait(30)
        return _report()

    first = threading.Thread(target=shared_evaluation, args=(INPUTS, "run-a", slow, tmp_path), kwargs={"poll_s": 0.05})
    first.start()
    assert measuring.wait(30)
    result: list[tuple[EvalReport, str | None]] = []
    second = threading.Thread(target=lambda: result.append(
        shared_evaluation(INPUTS, "run-b", lambda: second_measured.append(1) or _report(), tmp_path,
                          poll_s=0.05)))
    second.start()
    time.sleep(0.5)
    assert not result  # blocked on the lock, not measuring a second time
    release.set()
    first.join(30)
    second.join(30)
    assert result and result[0][1] == "run-a" and not second_measured


def test_the_lock_of_a_run_that_died_while_measuring_goes_stale_and_the_next_run_measures(tmp_path: Path):
    from dataclasses import asdict

    from wmrl.io import atomic_create_json
    from wmrl.storage.lock import LockOwner
    from wmrl.trainers.llm.shared_eval import eval_key

    dead_lock = tmp_path / f"{eval_key(INPUTS)}.lock"  # a run on another host that stopped beating
    assert atomic_create_json(dead_lock, asdict(LockOwner("another-host", 12345, None, 0, 0.0, "dead")))
    old = time.time() - 60
    os.utime(dead_lock, (old, old))
    report, by = shared_evaluation(INPUTS, "run-b", _report, tmp_path, stale_s=30, poll_s=0.05)
    assert by is None and report.sample_mean == 0.5


def test_a_second_run_from_the_same_start_reads_the_first_runs_evaluation(micro_run: Path, micro_model: Path):
    root = micro_run.parent
    done = wmrl("train", *micro_overrides(root, micro_model, "micro-again", steps=1))
    assert done.returncode == 0, done.stdout + done.stderr
    again = root / "micro-again"
    evals = {e["label"]: e for e in map(json.loads, (again / "evals.jsonl").read_text().splitlines())}
    first = {e["label"]: e for e in map(json.loads, (micro_run / "evals.jsonl").read_text().splitlines())}
    run_id = json.loads((micro_run / "manifest.json").read_text())["run_id"]
    assert evals["before"]["measured_by"] == run_id and "measured_by" not in evals["after"]
    assert evals["before"]["tasks"] == first["before"]["tasks"]
    assert len(list((root / SHARED_EVALS).glob("*.json"))) == 1
    log = (again / "logs" / "coordinator.log").read_text()
    assert "evaluation before (train): 1 tasks x k=1" not in log  # nothing generated or executed for it
    assert f"evaluation before (train): the initial policy's, as run {run_id} measured it" in log
