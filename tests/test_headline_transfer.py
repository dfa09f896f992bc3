"""scripts/headline.py on the transfer testbed (issue 35): the pool, the held-out score before and after with
its gain paired by seed, and the share of distinct codes among the executions, from run directories
written by the writers real runs use (evaluation lines, rollout records)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from script_support import load_script
from test_headline import _evaluation, _sweep

from wmrl.agent.records import write_rollouts
from wmrl.calibration.pool import AnchorPair, AnchorPool
from wmrl.rollout import Trajectory

HELDOUT = {"grpo_real": {0: (0.10, 0.20), 1: (0.10, 0.30), 2: (0.20, 0.30)},  # seed: (before, after)
           "wmrl": {0: (0.10, 0.15), 1: (0.10, 0.10), 2: (0.20, 0.25)}}


def _executed(task: str, code: str) -> Trajectory:
    return Trajectory(task, 0, 0, "executed", score=0.5, final_code=code, seconds={"execution": 1.0})


def test_headline_reports_the_heldout_gain_paired_by_seed_and_the_distinct_code_share(tmp_path: Path):
    sweep = _sweep(tmp_path)
    for run in sorted((sweep / "runs").iterdir()):
        variant, seed = run.name.rsplit("_s", 1)
        before, after = HELDOUT[variant][int(seed)]
        _evaluation(run, "before", 0, "heldout", [before])  # a later line replaces the earlier one
        _evaluation(run, "after", 2, "heldout", [after])
    # grpo_real seed 0 executed code "a" twice and "b" once: 2 distinct of 3
    write_rollouts(sweep / "runs" / "grpo_real_s0", 0, [[_executed("t", "a"), _executed("t", "a")]])
    write_rollouts(sweep / "runs" / "grpo_real_s0", 1, [[_executed("t", "b"),
                                                          Trajectory("t", 1, 0, "world_model", final_code="c")]])
    out = tmp_path / "out"
    assert load_script("headline").main([str(sweep), "--out", str(out)]) == 0
    h = json.loads((out / "headline.json").read_text())
    assert h["pool"] == {"name": "builtin", "train_tasks": 1, "heldout_tasks": 1}  # the runs' config and evaluations
    assert h["reuse_executions"] is True
    assert h["distinct_code_share"] == pytest.approx(2 / 3) and h["variants"]["wmrl"]["distinct_code_share"] is None
    g, w = h["variants"]["grpo_real"], h["variants"]["wmrl"]
    assert g["heldout_before_mean"] == pytest.approx(0.4 / 3) and g["heldout_after_mean"] == pytest.approx(0.8 / 3)
    assert g["heldout_after_se"] == pytest.approx((1 / 300) ** 0.5 / 3**0.5)
    # gains 0.1, 0.2, 0.1: mean 0.1333, sd 0.0577, t-interval with 2 degrees of freedom
    half = 4.302652729911275 * (1 / 300) ** 0.5 / 3**0.5
    assert g["heldout_paired_gain_ci95"] == pytest.approx([0.4 / 3 - half, 0.4 / 3 + half])
    assert w["heldout_paired_gain_ci95"][0] < 0 < w["heldout_paired_gain_ci95"][1]  # gains 0.05, 0, 0.05
    assert g["cpu_hours_mean"] == pytest.approx(0.2) and w["cpu_hours_mean"] == pytest.approx(0.15)
    assert "Held-out tasks (1 of the `builtin` pool" in (out / "headline.md").read_text()


# (r_hat, r) per trajectory of group "0/1" of each wmrl run: the same group id in two runs is two groups
PAIRS = {"wmrl_s0": [(0.9, 0.8), (0.5, 0.6), (0.6, 0.0)], "wmrl_s1": [(0.4, 0.4), (0.3, 0.4), (0.1, 0.0)]}


def test_headline_pairs_the_heldout_scores_across_variants_and_reads_the_world_models_anchor_pairs(tmp_path: Path):
    sweep = _sweep(tmp_path)
    for run in sorted((sweep / "runs").iterdir()):
        variant, seed = run.name.rsplit("_s", 1)
        before, after = HELDOUT[variant][int(seed)]
        _evaluation(run, "before", 0, "heldout", [before])
        _evaluation(run, "after", 2, "heldout", [after])
    for name, scored in PAIRS.items():  # written by the pool a run writes them with
        AnchorPool(sweep / "runs" / name / "calibration").add(
            [AnchorPair(f"0/1/{i}", 0, "t", "0/1", str(i), p, r) for i, (p, r) in enumerate(scored)])
    out = tmp_path / "out"
    assert load_script("headline").main([str(sweep), "--out", str(out)]) == 0
    w = json.loads((out / "headline.json").read_text())["variants"]["wmrl"]
    # held-out after, wmrl - grpo_real by seed: -0.05, -0.20, -0.05: mean -0.1, s.e. 0.05
    d = w["heldout_paired_diff"]
    assert d["n"] == 3 and d["mean"] == pytest.approx(-0.1) and d["se"] == pytest.approx(0.05)
    assert w["heldout_within_1se_of_grpo_real"] is False
    wm = w["world_model_in_run"]
    assert wm["pairs"] == 6 and wm["runs"] == 2
    # s0 orders 2 of its 3 pairs right (0.5 < 0.6 but 0.6 > 0.0), s1 both of its 2 (0.4 = 0.4 is no pair)
    assert wm["within_group_concordance"] == pytest.approx(4 / 5) and wm["within_group_pairs"] == 5
    assert wm["spearman_per_run"] == pytest.approx([0.5, 0.75**0.5])
    assert wm["verbatim_share"] == pytest.approx(1 / 6) and wm["bias_mean"] == pytest.approx(0.1)
    md = (out / "headline.md").read_text()
    assert "-0.100 ± 0.050 (s.e.)" in md and "not within 1 s.e. of grpo_real" in md
    assert "within-group order right for 80% of 5 pairs" in md


def test_saved_records_pool_with_later_runs_into_the_headline_the_whole_sweep_gives(tmp_path: Path):
    """A measurement spread over machines: the records of seeds 0-1 (committed; their run directories gone)
    and a later sweep's seed 2 give the headline one sweep of all three gives; one run read twice counts once."""
    sweep = _sweep(tmp_path)
    for name, scored in PAIRS.items():
        AnchorPool(sweep / "runs" / name / "calibration").add(
            [AnchorPair(f"0/1/{i}", 0, "t", "0/1", str(i), p, r) for i, (p, r) in enumerate(scored)])
    write_rollouts(sweep / "runs" / "grpo_real_s0", 0, [[_executed("t", "a"), _executed("t", "a")]])
    hl = load_script("headline")
    whole, records = tmp_path / "whole", tmp_path / "records"
    assert hl.main([str(sweep), "--out", str(whole), "--save-records", str(records)]) == 0
    assert sorted(p.name for p in records.iterdir()) == [f"{v}-s{s}.json" for v in ("grpo_real", "wmrl") for s in range(3)]
    later = tmp_path / "later" / "headline_reuse"
    (later / "runs").mkdir(parents=True)
    for name in ("grpo_real_s2", "wmrl_s2"):
        (records / f"{name.replace('_s', '-s')}.json").unlink()
        (sweep / "runs" / name).rename(later / "runs" / name)
    pooled = tmp_path / "pooled"
    assert hl.main([str(records), str(later), "--out", str(pooled)]) == 0
    assert hl.main([str(records), str(later), str(later), "--out", str(tmp_path / "twice")]) == 0
    a, b, c = (json.loads((d / "headline.json").read_text()) for d in (whole, pooled, tmp_path / "twice"))
    for h in (a, b, c):
        h.pop("sweep")
    assert a == b == c
    assert a["variants"]["wmrl"]["world_model_in_run"]["pairs"] == 6 and a["distinct_code_share"] == pytest.approx(0.5)


def test_two_different_runs_of_one_seed_are_refused_not_double_counted(tmp_path: Path):
    sweep = _sweep(tmp_path)
    hl = load_script("headline")
    records = tmp_path / "records"
    assert hl.main([str(sweep), "--out", str(tmp_path / "out"), "--save-records", str(records)]) == 0
    edited = records / "wmrl-s1.json"
    edited.write_text(json.dumps({**json.loads(edited.read_text()), "score": 0.99}))
    with pytest.raises(SystemExit, match="wmrl seed 1 twice, with different numbers"):
        hl.main([str(records), str(sweep), "--out", str(tmp_path / "out")])


def test_a_record_that_lost_its_rollouts_is_left_out_of_the_distinct_share_and_says_so(tmp_path: Path):
    sweep = _sweep(tmp_path)
    write_rollouts(sweep / "runs" / "grpo_real_s0", 0, [[_executed("t", "a"), _executed("t", "b")]])
    hl = load_script("headline")
    records = tmp_path / "records"
    assert hl.main([str(sweep), "--out", str(tmp_path / "out"), "--save-records", str(records)]) == 0
    lost = records / "grpo_real-s1.json"  # counts unknown: null, not 0 of 0
    lost.write_text(json.dumps({**json.loads(lost.read_text()), "executions": None, "distinct_codes": None}))
    assert hl.main([str(records), "--out", str(tmp_path / "out")]) == 0
    h = json.loads((tmp_path / "out" / "headline.json").read_text())
    assert h["distinct_code_share"] == 1.0 and h["variants"]["grpo_real"]["distinct_code_runs"] == 1
    assert "1 of its 3 runs kept them" in h["distinct_code_share_of"]
    assert "| 100% (1 of 3 runs) |" in (tmp_path / "out" / "headline.md").read_text()


def test_a_directory_that_is_not_records_is_named_not_half_read(tmp_path: Path):
    (tmp_path / "eval-heldout.json").write_text(json.dumps({"k": 2, "score": 0.3}))
    with pytest.raises(SystemExit, match=r"eval-heldout.json: not a run record \(no variant, seed"):
        load_script("headline").main([str(tmp_path), "--out", str(tmp_path / "out")])
