"""scripts/train_learning.py's compute table: CPU-hours per variant, to grpo_real's final score, and
grpo_real's score at a variant's CPU-hours, read from the run directories a `wmrl train` sweep writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from script_support import load_script


def _script():
    return load_script("train_learning")


def _run(root: Path, name: str, hours_per_step: float, scores: dict[int, float]) -> Path:
    """A run of 4 steps spending ``hours_per_step``, evaluated (train split) at the steps of ``scores``."""
    run = root / name
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text("".join(
        json.dumps({"step": step, "compute_hours": hours_per_step * step}) + "\n" for step in range(1, 5)))
    (run / "evals.jsonl").write_text("".join(
        json.dumps({"label": f"at{step}", "split": "train", "step": step, "sample_mean": value}) + "\n"
        for step, value in scores.items()))
    return run


def test_compute_table_reads_hours_to_grpo_reals_final_score_and_its_score_at_equal_hours(tmp_path: Path):
    tl = _script()
    runs = {"grpo_real": [_run(tmp_path, f"g{s}", 0.5, {0: 0.2, 2: 0.5, 4: 0.8}) for s in range(2)],
            "wmrl": [_run(tmp_path, "w0", 0.1, {0: 0.2, 4: 0.6}), _run(tmp_path, "w1", 0.2, {0: 0.2, 4: 1.0})]}
    rows, lines = tl.compute_table(runs)
    ref, wmrl = rows
    assert ref["cpu_hours"] == [2.0, 2.0] and ref["cpu_hours_vs_grpo_real"] == pytest.approx(1.0)
    assert wmrl["cpu_hours"] == pytest.approx([0.4, 0.8]) and wmrl["cpu_hours_vs_grpo_real"] == pytest.approx(0.3)
    # wmrl's seed-mean curve: (0, 0.2) -> (0.6, 0.8): it reaches grpo_real's final 0.8 at 0.6 CPU-hours
    assert wmrl["final_score"] == pytest.approx(0.8)
    assert wmrl["cpu_hours_to_grpo_real_final"] == pytest.approx(0.6)
    # grpo_real's curve (0, 0.2) -> (1, 0.5) -> (2, 0.8), read at wmrl's 0.6 CPU-hours
    assert wmrl["grpo_real_score_at_cpu_hours"] == pytest.approx(0.2 + 0.3 * 0.6)
    assert lines[0].startswith("| variant | seeds | CPU-hours") and "| 30.0% |" in lines[3]


def test_a_variant_that_never_reaches_grpo_reals_final_score_says_so(tmp_path: Path):
    tl = _script()
    runs = {"grpo_real": [_run(tmp_path, "g", 0.5, {0: 0.2, 4: 0.8})], "wmrl": [_run(tmp_path, "w", 0.1, {0: 0.2, 4: 0.5})]}
    rows, lines = tl.compute_table(runs)
    assert rows[1]["cpu_hours_to_grpo_real_final"] is None and "not reached" in lines[3]


def test_every_shared_evaluation_is_listed_with_the_hours_spent_by_its_step(tmp_path: Path):
    tl = _script()
    # w0 is also evaluated at step 2; w1 is not: only the steps every seed shares are averaged
    runs = {"wmrl": [_run(tmp_path, "w0", 0.1, {0: 0.2, 2: 0.7, 4: 0.6}), _run(tmp_path, "w1", 0.3, {0: 0.4, 4: 1.0})]}
    rows, lines = tl.evaluation_table(runs)
    assert [r["step"] for r in rows] == [0, 4]
    assert rows[1]["cpu_hours"] == pytest.approx([0.4, 1.2]) and rows[1]["score"] == pytest.approx([0.6, 1.0])
    assert lines[3].startswith("| wmrl | 4 | 0.8") and lines[3].endswith("| 0.600, 1.000 |")


def _finished(sweep: Path, variant: str, seed: int, reason: str = "finished") -> Path:
    run = sweep / "runs" / f"{variant}_s{seed}"
    run.mkdir(parents=True)
    (run / "ENDED").write_text(json.dumps({"reason": reason}))
    (run / "config.yaml").write_text(f"algorithm:\n  variant: {variant}\n  seed: {seed}\n")
    return run


def test_runs_of_several_sweeps_are_told_apart_where_a_variant_is_in_more_than_one(tmp_path: Path):
    """The budget sweep's wmrl runs beside tiny_train's: grpo_real keeps its name (the reference every
    ratio reads), each sweep's wmrl is labelled with its sweep; unfinished runs are left out."""
    tl = _script()
    main, budget = tmp_path / "tiny_train", tmp_path / "tiny_train_budget"
    grpo = [_finished(main, "grpo_real", s) for s in (1, 0)]
    wmrl = [_finished(main, "wmrl", 0)]
    longer = [_finished(budget, "wmrl", s) for s in (0, 1)]
    _finished(budget, "wmrl", 2, reason="cancelled")
    runs = tl.finished_runs([main, budget])
    assert runs == {"grpo_real": grpo[::-1], "wmrl [tiny_train]": wmrl, "wmrl [tiny_train_budget]": longer}
    assert tl.finished_runs([budget]) == {"wmrl": longer}


def test_values_read_between_two_evaluations_are_marked_interpolated(tmp_path: Path):
    """Issue 36: grpo_real evaluated at steps 0 and 4 only; wmrl's crossing of its final score and
    grpo_real's score at wmrl's CPU-hours both lie between those evaluations: not measurements."""
    tl = _script()
    runs = {"grpo_real": [_run(tmp_path, "g", 0.5, {0: 0.2, 4: 0.8})],
            "wmrl": [_run(tmp_path, "w", 0.1, {0: 0.2, 2: 0.7, 4: 1.0})]}
    rows, lines = tl.compute_table(runs)
    wmrl = rows[1]
    assert wmrl["cpu_hours_to_grpo_real_final_read"] == "interpolated"  # 0.8 lies between 0.7 and 1.0
    assert wmrl["grpo_real_score_at_cpu_hours_read"] == "interpolated"  # 0.4 h between grpo_real's 0 and 2
    assert lines[3].endswith("| 0.267 (interpolated) | 0.3200 (interpolated) |")
    assert any(line.startswith("(interpolated): read linearly between two evaluations") for line in lines)
    # a crossing at an evaluation, and a variant costing more than grpo_real's whole run, are not interpolated
    runs = {"grpo_real": [_run(tmp_path, "g2", 0.1, {0: 0.2, 4: 0.8})],
            "wmrl": [_run(tmp_path, "w2", 0.5, {0: 0.2, 2: 0.8, 4: 0.9})]}
    rows, lines = tl.compute_table(runs)
    assert rows[1]["cpu_hours_to_grpo_real_final_read"] == "evaluated"
    assert rows[1]["grpo_real_score_at_cpu_hours_read"] == "final"
    assert lines[3].endswith("| 1.000 | 0.8000 (its final) |") and "interpolated" not in "\n".join(lines)
