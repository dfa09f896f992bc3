"""The committed simulate sweep report: `wmrl compare` on it prints the table results/ holds."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from sweep_support import REPO, run_cli

COMMITTED = REPO / "results" / "sweeps" / "anchor_frac_wmax"


def test_compare_on_the_committed_sweep_prints_the_committed_table(tmp_path: Path):
    if not (COMMITTED / "records.jsonl").exists():
        pytest.fail(f"{COMMITTED} is not committed")
    done = run_cli([sys.executable, "-m", "wmrl.cli.main", "compare", str(COMMITTED),
                    "--out", str(tmp_path), "--no-log"])
    assert done.returncode == 0, done.stderr
    assert done.stdout == (COMMITTED / "compare.md").read_text()
    assert (tmp_path / "compare.csv").read_text() == (COMMITTED / "compare.csv").read_text()
    assert (tmp_path / "heatmap_wmrl.png").exists() and (tmp_path / "score_vs_gpu_hours.png").exists()
