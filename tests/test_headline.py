"""scripts/headline.py: wmrl against grpo_real, both reusing executions, paired by seed, one-time costs
included, on a sweep directory written by the writers real runs use (run directory, metrics log,
evaluation lines, ENDED marker)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from script_support import load_script

from wmrl.config import load_config
from wmrl.config_io import to_yaml
from wmrl.configs import TINY_CONFIG
from wmrl.evaluation import EvalReport, TaskScore
from wmrl.io import append_line_durable
from wmrl.models.cache import MARKER
from wmrl.sft.pipeline import pinned_initial_policy
from wmrl.storage.metrics_log import MetricsLog
from wmrl.storage.rundir import create_run_dir
from wmrl.trainers.llm.names import EVALS, MEMORY_BUILD


def _evaluation(run: Path, label: str, step: int, split: str, scores: list[float]) -> None:
    """One line of evals.jsonl as LLMTrainer._record_eval writes it."""
    report = EvalReport(k=len(scores), tasks=[TaskScore("t", "tabular", scores)], score=sum(scores) / len(scores),
                        sample_mean=sum(scores) / len(scores))
    line = {"label": label, "step": step, "split": split, "at": 1.0e9 + step, **report.to_dict()}
    append_line_durable(run / EVALS, json.dumps(line, sort_keys=True))


def _model(root: Path, build: str) -> Path:
    """A model directory a finished build marked with ``build`` (what a run pins as its start)."""
    path = root / "models" / build
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text("{}")
    (path / MARKER).write_text(json.dumps({"hash": build}))
    return path


def _run(sweep: Path, variant: str, seed: int, before: float, after: float, hours: float, steps: int = 2,
         reuse: bool = True, memory: dict | None = None, start: str = "sft-a", cpu_hours: float | None = None) -> Path:
    cfg = load_config(str(TINY_CONFIG), [f"algorithm.variant={variant}", f"algorithm.seed={seed}",
                                          f"train.steps={steps}", f"launch.reuse_executions={str(reuse).lower()}",
                                          f"model.path={_model(sweep.parent, start)}"])
    run = create_run_dir(sweep / "runs" / f"{variant}_s{seed}", to_yaml(cfg))
    pinned_initial_policy(cfg, run.path)
    log = MetricsLog(run.path)
    for step in range(1, steps + 1):
        log.record(step, {"compute_hours": hours * step / steps,
                          **({} if cpu_hours is None else {"cpu_hours": cpu_hours * step / steps})})
    _evaluation(run.path, "before", 0, "train", [before, before])
    _evaluation(run.path, "before", 0, "heldout", [0.0])
    _evaluation(run.path, "after", steps, "train", [after - 0.1, after + 0.1])
    _evaluation(run.path, "after", steps, "heldout", [0.0])
    if memory is not None:
        (run.path / MEMORY_BUILD).write_text(json.dumps(memory))
    run.mark_ended("finished")
    return run.path


BUILD = {"build": "sft-a", "samples": 176, "seconds_generation": 36.0, "executions": 40, "seconds_execution": 144.0}
GRPO = {0: 0.70, 1: 0.60, 2: 0.80}
WMRL = {0: 0.75, 1: 0.60, 2: 0.90}  # paired differences 0.05, 0.00, 0.10


def _sweep(tmp_path: Path, memory: dict | None = BUILD, reuse: bool = True, grpo_start: str = "sft-a") -> Path:
    sweep = tmp_path / "headline_reuse"
    for seed, score in GRPO.items():
        _run(sweep, "grpo_real", seed, 0.3, score, hours=0.2, reuse=reuse, start=grpo_start)
    for seed, score in WMRL.items():
        _run(sweep, "wmrl", seed, 0.3, score, hours=0.1, memory=memory)
    return sweep


def test_headline_pairs_by_seed_and_charges_the_memorys_build(tmp_path: Path):
    hl = load_script("headline")
    assert hl.MEMORY_BUILD == MEMORY_BUILD
    out = tmp_path / "out"
    assert hl.main([str(_sweep(tmp_path)), "--out", str(out)]) == 0
    h = json.loads((out / "headline.json").read_text())
    assert h["reuse_executions"] is True and h["cost_basis"] == "per_run" and h["initial_policy"] == "sft-a"
    g, w = h["variants"]["grpo_real"], h["variants"]["wmrl"]
    assert g["seeds"] == w["seeds"] == [0, 1, 2]
    assert g["score_mean"] == pytest.approx(0.7) and w["score_mean"] == pytest.approx(0.75)
    assert g["score_se"] == pytest.approx(0.1 / 3**0.5)
    # one-time: 36 s of generation + 144 s of executions = 0.05 CPU-hours, wmrl only
    assert g["one_time_cpu_hours"] == 0.0 and w["one_time_cpu_hours"] == pytest.approx(0.05)
    assert w["cpu_hours_mean"] == pytest.approx(0.15) and w["cpu_hours_mean_amortised"] == pytest.approx(0.1 + 0.05 / 3)
    assert w["cpu_hours_vs_grpo_real"] == pytest.approx(0.75)
    # paired differences 0.05, 0, 0.1: mean 0.05, sd 0.05, t-interval with 2 degrees of freedom
    assert w["paired_diff_mean"] == pytest.approx(0.05)
    half = 4.302652729911275 * 0.05 / 3**0.5
    assert w["paired_diff_ci95"] == pytest.approx([0.05 - half, 0.05 + half])
    assert set(h["design"]["power"]) == {"0.05", "0.10"} and 0 < h["design"]["power"]["0.05"] < h["design"]["power"]["0.10"]
    assert "75% of grpo_real's CPU-hours" in h["sentence"] and "+0.050" in h["sentence"]
    md = (out / "headline.md").read_text()
    assert "paired by seed" in md and "charged to each run (the headline's basis)" in md


def test_a_run_without_execution_reuse_is_refused(tmp_path: Path):
    hl = load_script("headline")
    with pytest.raises(SystemExit, match="reuse_executions is off in grpo_real_s0"):
        hl.main([str(_sweep(tmp_path, reuse=False)), "--out", str(tmp_path / "out")])


def test_runs_that_did_not_start_from_one_policy_are_not_paired(tmp_path: Path):
    hl = load_script("headline")
    with pytest.raises(SystemExit, match="did not start from one initial policy"):
        hl.main([str(_sweep(tmp_path, grpo_start="sft-b")), "--out", str(tmp_path / "out")])


def test_without_a_recorded_build_cost_it_asks_for_one(tmp_path: Path):
    """Runs whose memory was built before the cost was recorded: no silent zero."""
    hl = load_script("headline")
    sweep = _sweep(tmp_path, memory={"build": "sft-a", "executions": 40, "seconds_execution": 144.0})
    with pytest.raises(SystemExit, match="generation seconds"):
        hl.main([str(sweep), "--out", str(tmp_path / "out")])
    # a build measured apart (--memory-build) counts only when it is of the runs' initial policy
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**BUILD, "build": "sft-b"}))
    with pytest.raises(SystemExit, match="not of the runs' initial policy"):
        hl.main([str(sweep), "--out", str(tmp_path / "out"), "--memory-build", str(other)])
    remeasured = tmp_path / "remeasured.json"
    remeasured.write_text(json.dumps(BUILD))
    assert hl.main([str(sweep), "--out", str(tmp_path / "out"), "--memory-build", str(remeasured)]) == 0
    w = json.loads((tmp_path / "out" / "headline.json").read_text())["variants"]["wmrl"]
    assert w["one_time_cpu_hours"] == pytest.approx(0.05) and w["one_time"]["source"] == str(remeasured)
    assert hl.main([str(sweep), "--out", str(tmp_path / "out"), "--one-time-cpu-hours", "0.07",
                    "--one-time-source", "round 10's measurement"]) == 0
    w = json.loads((tmp_path / "out" / "headline.json").read_text())["variants"]["wmrl"]
    assert w["one_time_cpu_hours"] == 0.07 and w["one_time"]["source"] == "round 10's measurement"


def test_power_of_the_paired_design_matches_the_issues_three_seed_numbers():
    """Issue 36: sd of the paired differences 0.0705 over 3 seeds: power ~29% at 0.10, 18 seeds for 0.05."""
    from wmrl.sweep.paired import paired, pairs_for_power, power

    p = paired({0: 0.849, 1: 0.733, 2: 0.650}, {0: 0.865, 1: 0.819, 2: 0.595})
    assert p.mean == pytest.approx(0.0157, abs=1e-4) and p.ci95 == pytest.approx((-0.159, 0.191), abs=1e-3)
    assert power(0.10, p.sd, 3) == pytest.approx(0.29, abs=0.01)
    assert pairs_for_power(0.05, p.sd) == 18
    # a large effect on 3 pairs: scipy's nct.cdf gave NaN for the far tail (round 19's transfer headline)
    assert power(0.10, 0.0143, 3) == pytest.approx(0.99926, abs=1e-4)


def test_seeds_from_two_initial_policies_pool_each_charged_its_own_memory_build(tmp_path: Path):
    """A later machine builds another SFT (results/reproducibility): its seeds pair among themselves, and
    its memory's build is charged to its runs, not the first build's."""
    sweep = tmp_path / "headline_reuse"
    other = {"build": "sft-b", "samples": 176, "seconds_generation": 216.0, "executions": 40,
             "seconds_execution": 144.0}  # 0.1 CPU-hours
    for seed, start, memory in ((0, "sft-a", BUILD), (1, "sft-a", BUILD), (2, "sft-b", other)):
        _run(sweep, "grpo_real", seed, 0.3, GRPO[seed], hours=0.2, start=start)
        _run(sweep, "wmrl", seed, 0.3, WMRL[seed], hours=0.1, memory=memory, start=start)
    out = tmp_path / "out"
    assert load_script("headline").main([str(sweep), "--out", str(out)]) == 0
    h = json.loads((out / "headline.json").read_text())
    assert h["initial_policy_seeds"] == {"sft-a": [0, 1], "sft-b": [2]}
    w = h["variants"]["wmrl"]
    assert w["one_time_cpu_hours"] == pytest.approx((0.05 + 0.05 + 0.1) / 3)
    assert w["cpu_hours_mean_amortised"] == pytest.approx(0.1 + (0.05 + 0.1) / 3)
    assert w["one_time"]["per_initial_policy"]["sft-b"]["cpu_hours"] == pytest.approx(0.1)
    assert "`sft-b` seeds 2" in (out / "headline.md").read_text()
    with pytest.raises(SystemExit, match="--memory-build gives one build"):
        load_script("headline").main([str(sweep), "--out", str(out), "--memory-build", str(sweep)])


def test_the_measured_cpu_time_ratio_reads_the_seeds_where_both_runs_measured_it(tmp_path: Path):
    """Runs since round 22 log cpu_hours (load-independent); the headline compares it on the seeds whose two
    runs both have it, and says so, beside the wall-clock CPU-hours; without it, nothing is claimed."""
    hl = load_script("headline")
    sweep = tmp_path / "sweep"
    for seed, cpu in ((0, None), (1, 0.20), (2, 0.30)):
        _run(sweep, "grpo_real", seed, 0.3, GRPO[seed], hours=0.5, cpu_hours=cpu)
    for seed, cpu in ((0, 0.05), (1, 0.05), (2, 0.10)):
        _run(sweep, "wmrl", seed, 0.3, WMRL[seed], hours=0.2, memory=BUILD, cpu_hours=cpu)
    out = tmp_path / "out"
    assert hl.main([str(sweep), "--out", str(out)]) == 0
    measured = json.loads((out / "headline.json").read_text())["variants"]["wmrl"]["run_cpu_time_vs_grpo_real"]
    assert measured["seeds"] == [1, 2] and measured["ratio"] == pytest.approx(0.075 / 0.25)
    assert "seeds 1, 2): wmrl 0.075 h, grpo_real 0.250 h, **0.30x**" in (out / "headline.md").read_text()
    assert measured["one_time_hours"] is None and "ratio_with_one_time" not in measured  # BUILD: wall seconds only
    assert hl.main([str(_sweep(tmp_path / "old")), "--out", str(tmp_path / "old-out")]) == 0
    old = json.loads((tmp_path / "old-out" / "headline.json").read_text())["variants"]["wmrl"]
    assert old["run_cpu_time_vs_grpo_real"] is None


def test_a_memory_build_measured_in_cpu_time_is_charged_to_the_cpu_time_ratio(tmp_path: Path):
    """Since round 23 the memory's build records its CPU time (the draw's and its programs'): the measured
    ratio then counts it too, as the wall-clock headline counts the build's wall seconds."""
    hl = load_script("headline")
    sweep = tmp_path / "sweep"
    build = {**BUILD, "cpu_seconds_generation": 18.0, "cpu_seconds_execution": 72.0}  # 0.025 h
    for seed in (1, 2):
        _run(sweep, "grpo_real", seed, 0.3, GRPO[seed], hours=0.5, cpu_hours=0.25)
        _run(sweep, "wmrl", seed, 0.3, WMRL[seed], hours=0.2, memory=build, cpu_hours=0.05)
    out = tmp_path / "out"
    assert hl.main([str(sweep), "--out", str(out)]) == 0
    measured = json.loads((out / "headline.json").read_text())["variants"]["wmrl"]["run_cpu_time_vs_grpo_real"]
    assert measured["one_time_hours"] == pytest.approx(0.025)
    assert measured["ratio"] == pytest.approx(0.2) and measured["ratio_with_one_time"] == pytest.approx(0.3)
    assert "**0.30x** with the memory's build (0.025 h of CPU time)" in (out / "headline.md").read_text()
