"""scripts/check_plan.py: a plan's orderings against the real sweep's, and where the plan was wrong."""

from __future__ import annotations

from pathlib import Path

import pytest
from script_support import load_script

from wmrl.sweep.plan_check import check_plan

HEAD = "variant,anchor_frac,w_max,seeds,final_score,final_score_se,gpu_hours\n"


def _table(path: Path, rows: list[tuple]) -> Path:
    path.write_text(HEAD + "".join(",".join(str(x) for x in r) + "\n" for r in rows))
    return path


@pytest.fixture
def tables(tmp_path):
    predicted = _table(tmp_path / "plan.csv", [
        ("grpo_real", 0.1, 4, 3, 0.60, 0.01, 50.0),
        ("wmrl", 0.1, 4, 3, 0.50, 0.01, 10.0),
        ("wmrl", 0.4, 4, 3, 0.55, 0.01, 20.0),
        ("wmrl", 0.4, 8, 3, 0.56, 0.01, 20.0),  # never run
    ])
    real = _table(tmp_path / "compare.csv", [
        ("grpo_real", 0.125, 4, 2, 0.498, 0.010, 60.0),  # anchor_frac does not change grpo_real: still matched
        ("wmrl", 0.1, 4, 2, 0.530, 0.002, 12.0),
        ("wmrl", 0.4, 4, 2, 0.500, 0.002, 25.0),
    ])
    return predicted, real


def test_a_correctly_predicted_compute_ordering_has_no_wrong_pair(tables):
    report = check_plan(*tables)
    compute = next(m for m in report.metrics if m.metric == "gpu_hours")
    assert compute.wrong == [] and compute.tau == pytest.approx(1.0)
    assert compute.predicted_order == compute.real_order == ["wmrl anchor_frac=0.1 w_max=4",
                                                             "wmrl anchor_frac=0.4 w_max=4", "grpo_real"]


def test_a_reversed_score_pair_is_named_and_a_reversal_within_noise_is_a_tie(tables):
    score = next(m for m in check_plan(*tables).metrics if m.metric == "final_score")
    assert len(score.wrong) == 2 and all("wmrl anchor_frac=0.1 w_max=4" in w for w in score.wrong)
    assert score.ties == ["grpo_real vs wmrl anchor_frac=0.4 w_max=4: predicted 0.6 vs 0.55, real 0.498 vs 0.5"]


def test_settings_on_one_side_only_are_listed(tables):
    report = check_plan(*tables)
    assert report.only_predicted == ["wmrl anchor_frac=0.4 w_max=8"] and report.only_real == []
    assert "Predicted but not run: wmrl anchor_frac=0.4 w_max=8" in report.markdown()


def test_tables_without_a_common_setting_are_an_error(tmp_path):
    a = _table(tmp_path / "a.csv", [("wmrl", 0.1, 4, 1, 0.5, 0.0, 1.0)])
    b = _table(tmp_path / "b.csv", [("pure_wm", 0.1, 4, 1, 0.5, 0.0, 1.0)])
    with pytest.raises(ValueError, match="no setting is in both"):
        check_plan(a, b)


def test_the_script_writes_the_report(tables, tmp_path):
    script = load_script("check_plan")
    out = tmp_path / "check.md"
    assert script.main([str(tables[0].parent), str(tables[1]), "--out", str(out)]) == 0
    assert "## Ordering by final score (best first)" in out.read_text()


def test_the_report_shows_predicted_and_real_values_side_by_side(tables):
    """Orderings can all be right while a number is far off: the report shows both."""
    report = check_plan(*tables)
    pred, real = next((p, r) for p, r in report.values if p.label == "grpo_real")
    row = (f"| grpo_real | {pred.score:.4f} ± {pred.score_se:.4f} | {real.score:.4f} ± {real.score_se:.4f} | "
           f"{pred.gpu_hours:.3g} | {real.gpu_hours:.3g} |")
    assert row in report.markdown() and len(report.values) == len(report.matched)


def test_a_one_seed_real_setting_has_no_error_bar(tmp_path):
    predicted = _table(tmp_path / "plan.csv", [("grpo_real", 0.1, 4, 5, 0.60, 0.01, 50.0),
                                               ("wmrl", 0.1, 4, 5, 0.50, 0.01, 10.0)])
    real = _table(tmp_path / "compare.csv", [("grpo_real", 0.1, 4, 1, 0.81, 0.0, 60.0),
                                             ("wmrl", 0.1, 4, 3, 0.59, 0.02, 12.0)])
    text = check_plan(predicted, real).markdown()
    assert "| grpo_real | 0.6000 ± 0.0100 | 0.8100 (1 seed) |" in text
    assert "| wmrl anchor_frac=0.1 w_max=4 | 0.5000 ± 0.0100 | 0.5900 ± 0.0200 |" in text
