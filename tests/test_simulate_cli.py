"""`wmrl simulate` end to end on a tiny sweep (real processes, real files, real plots)."""

from __future__ import annotations

import json

import pytest

from wmrl.cli.main import main


def test_simulate_writes_table_summary_and_plots(tmp_path):
    out = tmp_path / "sim"
    rc = main(
        ["simulate", "train.steps=40", "tracking.enabled=false", "--variants", "wmrl,grpo_real", "--seeds", "2",
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


def _simulate(out, *extra):
    return main(["simulate", "train.steps=20", "simulator.log_every=5", "--variants", "wmrl,grpo_real",
                 "--seeds", "1", "--workers", "1", "--out", str(out), *extra])


def test_simulate_logs_every_run_through_its_outbox_and_compare_reads_both_sources_alike(tmp_path, capsys):
    from mlflow.tracking import MlflowClient

    from wmrl.tracking.outbox import Outbox

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    out = tmp_path / "sim"
    assert _simulate(out, f"tracking.uri={uri}", "tracking.experiment=sim-test") == 0
    client = MlflowClient(uri)
    for variant in ("wmrl", "grpo_real"):
        run_dir = out / "runs" / f"{variant}-seed0"
        assert Outbox(run_dir).pending() == [] and Outbox(run_dir).records()[-1]["kind"] == "status"
        run = client.get_run((run_dir / "mlflow_run_id").read_text().strip())
        assert run.info.status == "FINISHED"
        assert run.data.params["algorithm.variant"] == variant and run.data.params["train.steps"] == "20"
        assert [m.step for m in client.get_metric_history(run.info.run_id, "sim/score")] == [5, 10, 15, 20]
        assert "final/score" in run.data.metrics and "cost/execution_gpu_hours" in run.data.metrics
    capsys.readouterr()
    assert main(["compare", str(out), "--out", str(tmp_path / "from_dir")]) == 0
    assert main(["compare", "--tracking-uri", uri, "--experiment", "sim-test", "--out", str(tmp_path / "from_mlflow"),
                 "--no-log"]) == 0
    assert (tmp_path / "from_dir" / "compare.csv").read_text() == (tmp_path / "from_mlflow" / "compare.csv").read_text()


def test_simulate_keeps_the_records_a_down_store_missed_for_wmrl_sync(tmp_path, capsys):
    from mlflow.tracking import MlflowClient
    from mlflow_server import free_port

    out = tmp_path / "sim"
    down = f"http://127.0.0.1:{free_port()}"
    assert _simulate(out, f"tracking.uri={down}", "tracking.request_timeout_s=2") == 0
    assert "wmrl sync" in capsys.readouterr().err
    run_dir = out / "runs" / "wmrl-seed0"
    assert not (run_dir / "mlflow_run_id").exists()
    uri = f"sqlite:///{tmp_path}/later.db"
    assert main(["sync", str(run_dir), f"tracking.uri={uri}"]) == 0
    run_id = (run_dir / "mlflow_run_id").read_text().strip()
    assert [m.step for m in MlflowClient(uri).get_metric_history(run_id, "sim/score")] == [5, 10, 15, 20]
