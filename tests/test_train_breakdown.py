"""What a `wmrl train` run records about its cost: the coordinator's peak memory (per step, in progress.json,
in `wmrl status`) and the per-phase seconds that benchmarks/bench_train_step.py turns into the step-time
breakdown, on the micro run (session fixture ``micro_run``)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from train_support import REPO, cli_env, metrics_rows, wmrl

# the session's micro run (a few minutes; more on a loaded machine) is set up inside the first test
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]
BENCH = REPO / "benchmarks" / "bench_train_step.py"
PHASES = ["generation", "world_model", "execution", "update", "weight_sync", "io", "evaluation", "checkpoint",
          "other"]


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(BENCH), *args], cwd=REPO, env=cli_env(), capture_output=True,
                          text=True, timeout=300, check=False)


def test_every_step_records_the_coordinator_peak_rss_covering_the_learner_peak(micro_run):
    for row in metrics_rows(micro_run):
        # the process's high-water mark covers every resident-set sample the learner took inside it (up to
        # the kernel's per-CPU counter batching, tens of KiB)
        assert row["peak_rss_mb"] >= row["learner/peak_memory_mb"] - 1.0 > 0
        assert row["peak_rss_children_mb"] >= 0


def test_status_shows_the_coordinator_peak_memory_of_progress(micro_run):
    progress = json.loads((micro_run / "progress.json").read_text())
    out = wmrl("status", str(micro_run))
    assert out.returncode == 0, out.stderr
    (line,) = [t for t in out.stdout.splitlines() if t.startswith("memory ")]
    assert f"coordinator peak RSS {progress['peak_rss_mb']:.0f} MB" in line
    assert progress["peak_rss_mb"] >= max(r["peak_rss_mb"] for r in metrics_rows(micro_run))


def test_bench_train_step_breaks_the_mean_step_into_phases_that_add_up(micro_run, tmp_path):
    done = bench("--run-dir", str(micro_run), "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "step_breakdown.json").read_text())
    rows = metrics_rows(micro_run)
    assert result["steps"] == len(rows) == 2
    phases = result["phases"]
    assert sorted(phases) == sorted(PHASES)
    assert sum(p["mean_s"] for p in phases.values()) == pytest.approx(result["step_seconds"]["mean_s"])
    assert sum(p["share"] for p in phases.values()) == pytest.approx(1.0)
    assert phases["generation"]["mean_s"] == pytest.approx(sum(r["step_seconds_generation"] for r in rows) / 2)
    assert phases["generation"]["se_s"] > 0 and phases["update"]["mean_s"] > 0
    assert result["peak_memory_mb"]["peak_rss_mb"] == max(r["peak_rss_mb"] for r in rows)
    table = (tmp_path / "step_breakdown.md").read_text()
    assert all(f"| {phase} |" in table for phase in PHASES) and "coordinator process (peak RSS)" in table


def test_bench_train_step_names_what_a_run_without_the_llm_phases_lacks(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "step_seconds": 2.0}) + "\n")
    done = bench("--run-dir", str(tmp_path), "--out", str(tmp_path / "out"))
    assert done.returncode != 0 and "step_seconds_generation" in done.stderr and "wmrl train" in done.stderr
    assert not (tmp_path / "out").exists()
