"""`wmrl compare`: means over seeds, speedup against grpo_real, the cheapest setting near the best."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from wmrl.sweep.compare import compare, markdown
from wmrl.sweep.records import RunRecord, read_records, write_records


def _rec(variant: str, seed: int, score: float, hours: list[float], curve: list[float], af: float = 0.1,
         w_max: float = 4.0) -> RunRecord:
    return RunRecord(name=f"{variant}-{af}-{w_max}-{seed}", variant=variant, seed=seed, anchor_frac=af,
                     w_max=w_max, final_score=score, gpu_hours=hours[-1], curve_hours=hours, curve_score=curve)


REF = [_rec("grpo_real", s, 0.4, [10, 20, 30, 40], [0.1, 0.2, 0.3, 0.4]) for s in range(2)]


def test_final_score_is_mean_and_standard_error_over_seeds():
    runs = [_rec("wmrl", s, v, [1, 2], [0.1, v]) for s, v in enumerate([0.3, 0.5, 0.4])]
    setting = compare(runs).settings[0]
    assert setting.score == pytest.approx(0.4)
    assert setting.score_se == pytest.approx(0.1 / 3**0.5)  # sample std 0.1 over sqrt(3)


def test_speedup_to_target_is_grpo_real_hours_over_the_settings_hours():
    cheap = [_rec("wmrl", s, 0.4, [2, 4, 6, 8], [0.1, 0.2, 0.3, 0.4]) for s in range(2)]
    c = compare(REF + cheap)
    assert c.target == pytest.approx(0.37)  # 0.1 + 90% of grpo_real's gain 0.3
    wmrl = next(s for s in c.settings if s.variant == "wmrl")
    assert wmrl.hours_to_target == pytest.approx(7.4)
    assert wmrl.speedup_to_target == pytest.approx(37 / 7.4)


def test_equal_compute_reads_grpo_real_at_the_settings_gpu_hours():
    cheap = [_rec("wmrl", s, 0.35, [5, 15, 25], [0.1, 0.2, 0.35]) for s in range(2)]
    wmrl = next(s for s in compare(REF + cheap).settings if s.variant == "wmrl")
    assert wmrl.ref_score_at_compute == pytest.approx(0.25)  # grpo_real's curve at 25 GPU-hours


def test_setting_that_never_reaches_the_target_has_no_speedup():
    flat = [_rec("pure_wm", s, 0.2, [1, 2], [0.2, 0.2]) for s in range(2)]
    pure = next(s for s in compare(REF + flat).settings if s.variant == "pure_wm")
    assert pure.hours_to_target is None and pure.speedup_to_target is None


def test_cheapest_setting_within_one_standard_error_of_the_best_is_named():
    best = [_rec("wmrl", s, v, [100], [v], af=0.4) for s, v in enumerate([0.48, 0.52])]  # 0.50 ± 0.02
    close = [_rec("wmrl", s, v, [10], [v], af=0.1) for s, v in enumerate([0.48, 0.49])]  # 0.485, within
    far = [_rec("wmrl", s, v, [1], [v], af=0.05) for s, v in enumerate([0.30, 0.31])]
    c = compare(best + close + far)
    assert (c.best.anchor_frac, c.cheapest.anchor_frac) == (0.4, 0.1)
    assert "Cheapest within one standard error of the best: **wmrl anchor_frac=0.1 w_max=4**" in markdown(c)


def test_records_round_trip_through_jsonl(tmp_path: Path):
    write_records(REF, tmp_path / "records.jsonl")
    assert read_records(tmp_path / "records.jsonl") == REF


def test_a_one_seed_setting_says_so_instead_of_a_zero_error_bar():
    from wmrl.sweep.compare import compare, markdown
    from wmrl.sweep.records import RunRecord

    one = RunRecord(name="grpo_real_s0", variant="grpo_real", seed=0, anchor_frac=0.125, w_max=4.0,
                    final_score=0.81, gpu_hours=1.9, eta2=None, rho=None, audit_warned=None, phase_hours={},
                    curve_hours=[0.1, 1.9], curve_score=[0.4, 0.81])
    table = markdown(compare([one]))
    assert "0.8100 (1 seed)" in table and "± 0.0000" not in table


def test_a_trainer_curve_pairs_each_evaluation_with_the_cost_at_its_step():
    """Scores at the evaluations (steps 0, 6, 12), cost every step: paired by step, not by position."""
    from wmrl.sweep.records import score_curve

    cost = [(step, 0.1 * step) for step in range(1, 13)]
    hours, score = score_curve([(0, 0.3), (6, 0.5), (12, 0.8)], cost)
    assert score == [0.3, 0.5, 0.8]
    assert hours == pytest.approx([0.0, 0.6, 1.2])  # before the first step nothing was spent
    assert score_curve([(5, 0.4)], [(2, 0.2), (4, 0.4), (7, 0.7)])[0] == [0.4]  # the last cost before it
    # a run that never logged the cost metric has no curve (its hours are unknown, not zero), so the
    # setting's mean curve, its speedup and its line on the plot are not drawn from zeros
    assert score_curve([(0, 0.3), (12, 0.8)], []) == ([], [])
    measured = _rec("wmrl", 1, 0.8, [0.01, 0.1], [0.3, 0.8])
    unmeasured = RunRecord(name="wmrl-s0", variant="wmrl", seed=0, anchor_frac=0.1, w_max=4.0, final_score=0.8,
                           gpu_hours=float("nan"))
    assert not len(compare([measured, unmeasured]).settings[0].curve_hours)


def test_a_trainer_runs_phases_come_from_its_measured_seconds():
    from wmrl.sweep.records import _phase_hours

    trainer = {"seconds_execution": 3600.0, "seconds_update": 1800.0, "seconds_per_step": 99.0, "compute_hours": 1.5}
    assert _phase_hours(trainer) == {"execution": 1.0, "update": 0.5}
    simulator = {"cost/execution_gpu_hours": 2.0, "seconds_update": 1800.0}
    assert _phase_hours(simulator) == {"execution": 2.0}  # the priced cost, when there is one


def test_columns_name_the_unit_the_runs_measured_and_say_when_units_mix():
    from dataclasses import replace

    from wmrl.sweep.compare import csv_text

    cpu = [replace(r, hours_unit="CPU") for r in REF]
    text = markdown(compare(cpu))
    assert "| CPU-hours | CPU-h to target |" in text and "grpo_real at equal CPU-h" in text
    assert "GPU" not in text
    assert next(csv.DictReader(io.StringIO(csv_text(compare(cpu)))))["hours_unit"] == "CPU"
    mixed = markdown(compare(cpu + [_rec("wmrl", 0, 0.3, [1, 2], [0.1, 0.3])]))  # a GPU run among CPU ones
    assert "| compute-hours |" in mixed and "do not share one unit" in mixed
    assert "| GPU-hours |" in markdown(compare(REF))  # the simulator's (modelled) GPU-hours


def test_hours_keep_three_significant_digits_at_tiny_and_cluster_scale():
    from dataclasses import replace

    tiny = [replace(r, hours_unit="CPU") for r in
            [_rec("grpo_real", s, 0.7, [0.12, 0.358], [0.3, 0.7]) for s in range(2)]
            + [_rec("wmrl", s, 0.7, [0.05, 0.199], [0.3, 0.7]) for s in range(2)]]
    rows_by_variant = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in markdown(compare(tiny)).splitlines()
                       if line.startswith(("| grpo_real", "| wmrl"))}
    assert rows_by_variant["grpo_real"][5] == "0.358" and rows_by_variant["wmrl"][5] == "0.199"  # not "0.4", "0.2"
    cluster = markdown(compare([_rec("grpo_real", s, 0.4, [600, 1234], [0.1, 0.4]) for s in range(2)]))
    assert "| 1.23e+03 |" not in cluster and "| 1234 |" in cluster


def test_compare_says_which_initial_policy_the_runs_started_from_and_warns_when_they_differ():
    from dataclasses import replace

    same = [replace(r, initial_policy="sft-3cc97f37219cbc82") for r in REF]
    assert "Every run started from the initial policy `sft-3cc97f37219cbc82`." in markdown(compare(same))
    other = replace(_rec("wmrl", 0, 0.3, [1, 2], [0.1, 0.3]), initial_policy="sft-10d6aa63246dd47f")
    mixed = compare(same + [other])
    assert mixed.mixed_initial_policies
    assert mixed.initial_policies == {"sft-10d6aa63246dd47f": [other.name],
                                      "sft-3cc97f37219cbc82": sorted(r.name for r in REF)}
    assert "**The runs did not start from one initial policy**" in markdown(mixed)
    assert "initial policy" not in markdown(compare(REF))  # simulator runs have none: nothing to say


def test_a_trainer_runs_mlflow_run_names_its_pinned_initial_policy(tmp_path: Path):
    # The coordinator's tracker tags the run with the pin `wmrl launch` wrote; `wmrl compare` reads it back.
    from launch_support import dry_config, make_run

    from wmrl.io import atomic_write_json
    from wmrl.orchestration.coordinator import open_tracker
    from wmrl.sft.pipeline import INITIAL_POLICY, initial_policy_label
    from wmrl.sweep.records import from_mlflow

    pins = [{"path": "/c/sft/sft-3cc97f37219cbc82", "build_hash": "3cc97f37219cbc82" + "0" * 48},
            {"path": "/models/my-sft", "build_hash": "0123456789abcdef" + "1" * 48},
            {"path": "/models/Qwen3.5-4B", "build_hash": None}]
    ids = []
    for seed, pin in enumerate(pins):
        cfg = dry_config(tmp_path, f"run{seed}", 1, f"algorithm.seed={seed}")
        run = make_run(cfg)
        atomic_write_json(run.path / INITIAL_POLICY, pin)
        with open_tracker(cfg, run) as tracker:
            tracker.log_metrics({"executions": 1.0, "compute_hours": 0.1}, step=1)
        ids.append((run.path / "mlflow_run_id").read_text().strip())
    records = from_mlflow(f"sqlite:///{tmp_path}/mlflow.db", run_ids=ids, score_metric="executions",
                          cost_metric="compute_hours")
    assert [r.initial_policy for r in records] == ["sft-3cc97f37219cbc82", "my-sft@0123456789abcdef", "Qwen3.5-4B"]
    assert compare(records).mixed_initial_policies
    assert initial_policy_label(tmp_path) is None  # no pin, no tag


def test_interpolated_readings_are_marked_in_the_table_and_the_csv():
    """Issue 36: a trainer's grpo_real logs its score at steps 0 and 12 only; the speedup to the target
    and grpo_real's score at a setting's hours are read between them: marked, never shown as measured."""
    from wmrl.sweep.compare import csv_text

    ref = [_rec("grpo_real", s, 0.8, [0.0, 0.15], [0.3, 0.8]) for s in range(2)]
    wmrl = [_rec("wmrl", s, 0.8, [0.0, 0.05, 0.1], [0.3, 0.7, 0.8]) for s in range(2)]
    c = compare(ref + wmrl)
    w = next(s for s in c.settings if s.variant == "wmrl")
    assert (w.hours_to_target_read, w.ref_score_at_compute_read) == ("interpolated", "interpolated")
    table = markdown(c)
    row = next(line for line in table.splitlines() if line.startswith("| wmrl"))
    assert "(interpolated)" in row and "0.6333 (interpolated)" in row
    assert "(interpolated): read linearly between two logged points" in table
    row = next(r for r in csv.DictReader(io.StringIO(csv_text(c))) if r["variant"] == "wmrl")
    assert (row["gpu_hours_to_target_read"], row["grpo_real_score_at_equal_gpu_hours_read"]) == ("interpolated",) * 2
    assert row["hours_unit"] == "GPU"
    # every reading at a logged point: nothing marked
    same = compare([_rec("grpo_real", s, 0.8, [0.0, 0.1], [0.3, 0.8]) for s in range(2)]
                   + [_rec("wmrl", s, 0.8, [0.0, 0.1], [0.3, 0.8]) for s in range(2)], target=0.8)
    assert "(interpolated)" not in markdown(same)


def test_compare_pools_several_sources_each_run_once(tmp_path: Path, capsys):
    """A comparison's saved records plus a later sweep that added seeds: every (setting, seed) counts once
    (a run found in both, with the same numbers, is one run), and two different runs of one seed are refused."""
    from wmrl.cli.main import main

    wmrl = [_rec("wmrl", s, 0.35 + 0.01 * s, [1, 2, 3, 4], [0.1, 0.2, 0.3, 0.35]) for s in range(3)]
    saved, later, conflict = tmp_path / "saved", tmp_path / "later", tmp_path / "conflict"
    for d, records in ((saved, [REF[0], *wmrl[:2]]), (later, [REF[1], wmrl[1], wmrl[2]]),
                       (conflict, [_rec("wmrl", 1, 0.99, [1, 2, 3, 4], [0.1, 0.2, 0.3, 0.99])])):
        d.mkdir()
        write_records(records, d / "records.jsonl")
    out = tmp_path / "out"
    assert main(["compare", str(saved), str(later), "--out", str(out)]) == 0
    pooled = read_records(out / "records.jsonl")
    assert sorted((r.variant, r.seed) for r in pooled) == [("grpo_real", 0), ("grpo_real", 1), ("wmrl", 0),
                                                         ("wmrl", 1), ("wmrl", 2)]
    assert "| wmrl | 0.1 | 4 | 3 |" in (out / "compare.md").read_text()  # three seeds, seed 1 once
    capsys.readouterr()
    assert main(["compare", str(saved), str(conflict), "--out", str(tmp_path / "refused")]) != 0
    assert "wmrl anchor_frac=0.1 w_max=4 seed 1 twice, with different numbers" in capsys.readouterr().err


def test_a_run_without_the_cost_metric_is_one_run_when_read_twice():
    """A run that did not log the cost metric (NaN hours) read from saved records and again from its sweep
    is the same run: NaN never equals NaN, which refused it as two different runs of one seed."""
    from wmrl.sweep.records import pool_records

    unmeasured = RunRecord(name="wmrl-s0", variant="wmrl", seed=0, anchor_frac=0.1, w_max=4.0, final_score=0.4,
                           gpu_hours=float("nan"))
    again = RunRecord(**{**unmeasured.__dict__, "gpu_hours": float("nan")})  # read anew: another NaN object
    assert len(pool_records([("saved", [unmeasured]), ("sweep", [again])])) == 1
    other = RunRecord(**{**unmeasured.__dict__, "final_score": 0.5})
    with pytest.raises(ValueError, match="seed 0 twice, with different numbers"):
        pool_records([("saved", [unmeasured]), ("sweep", [other])])


def test_settings_pair_by_seed_with_grpo_real_and_with_anchor_only_at_their_anchor_frac():
    """Each seed is one start: wmrl minus grpo_real and minus grpo_anchor_only at its own anchor fraction,
    over the seeds both ran, with the t-interval; a seed from another checkpoint does not pair."""
    from wmrl.sweep.compare import csv_text

    def run(variant: str, seed: int, score: float, af: float = 0.125, w_max: float = 4.0, start: str = "sft-a"):
        r = _rec(variant, seed, score, [1.0, 2.0], [0.1, score], af=af, w_max=w_max)
        r.initial_policy = start
        return r

    real = [run("grpo_real", s, v) for s, v in enumerate([0.50, 0.40, 0.60])]
    anchors = [run("grpo_anchor_only", s, v, af=af) for af in (0.125, 0.5) for s, v in enumerate([0.20, 0.30, 0.10])]
    wmrl = [run("wmrl", s, v, af=0.5, w_max=1.0) for s, v in enumerate([0.45, 0.40, 0.50])]
    other_start = run("wmrl", 3, 0.9, af=0.5, w_max=1.0, start="sft-b")  # no seed-3 baseline from sft-b
    c = compare(real + anchors + wmrl + [other_start])
    cell = next(s for s in c.settings if s.variant == "wmrl")
    assert cell.vs_reference.n == 3 and cell.vs_reference.mean == pytest.approx(-0.05)  # -0.05, 0, -0.1
    half = 4.302652729911275 * 0.05 / 3**0.5
    assert cell.vs_reference.ci95 == pytest.approx((-0.05 - half, -0.05 + half))
    assert cell.vs_anchor_only.n == 3 and cell.vs_anchor_only.mean == pytest.approx(0.25)  # 0.25, 0.1, 0.4
    anchor = next(s for s in c.settings if s.variant == "grpo_anchor_only" and s.anchor_frac == 0.5)
    assert anchor.vs_anchor_only is None and anchor.vs_reference.mean == pytest.approx(-0.3)
    assert next(s for s in c.settings if s.variant == "grpo_real").vs_reference is None
    md = markdown(c)
    assert "| wmrl anchor_frac=0.5 w_max=1 | -0.0500 [" in md and "+0.2500 [" in md
    row = next(r for r in csv.DictReader(io.StringIO(csv_text(c))) if r["variant"] == "wmrl")
    assert float(row["minus_grpo_anchor_only_mean"]) == pytest.approx(0.25) and row["minus_grpo_anchor_only_seeds"] == "3"


def test_without_a_baseline_nothing_is_paired():
    c = compare([_rec("wmrl", s, v, [1], [v]) for s, v in enumerate([0.3, 0.4])])
    assert c.settings[0].vs_reference is None and c.settings[0].vs_anchor_only is None
    assert "Paired by seed" not in markdown(c)
