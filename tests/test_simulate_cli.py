"""`wmrl simulate` end to end on a tiny sweep (real processes, real files, real plots)."""

from __future__ import annotations

import json

import pytest

from wmrl.cli.main import main


def test_simulate_writes_table_summary_and_plots(tmp_path):
    out = tmp_path / "sim"
    rc = main(
        ["simulate", "simulator.steps=40", "tracking.enabled=false", "--variants", "wmrl,grpo_real", "--seeds", "2",
         "--out", str(out)]
    )
    assert rc == 0
    for name in ("table.md", "table.csv", "summary.json", "runs.json", "score_vs_compute.png", "fitted_map.png",
                 "rho_eta2.png"):
        assert (out / name).stat().st_size > 0, name
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["variants"]) == {"wmrl", "grpo_real"}
    assert summary["variants"]["wmrl"]["seeds"] == [0, 1]


def test_simulate_rejects_an_unknown_variant(tmp_path, capsys):
    assert main(["simulate", "--variants", "wmrl,nope", "--out", str(tmp_path)]) == 2
    assert "nope" in capsys.readouterr().err


def test_simulate_rejects_an_unknown_scenario(tmp_path, capsys):
    assert main(["simulate", "--scenario", "nope", "--out", str(tmp_path)]) == 2
    assert "default" in capsys.readouterr().err


@pytest.mark.parametrize("bad", ["simulator.phi=wobbly", "simulator.nope=1"])
def test_simulate_reports_config_errors_with_exit_code_2(tmp_path, bad, capsys):
    assert main(["simulate", bad, "--out", str(tmp_path)]) == 2
    assert "simulator." in capsys.readouterr().err
