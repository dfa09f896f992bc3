"""Helpers of the sweep tests: a small simulate sweep spec and reading a sweep's MLflow children."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SMALL_SPEC = """\
name: small
kind: simulate
config: configs/simulate.yaml
overrides: [train.steps=30, simulator.log_every=10, tracking.experiment=sweep-test]
seeds: [0, 1]
groups:
  - variants: [wmrl]
    grid: {algorithm.anchor_frac: [0.1, 0.4], algorithm.w_max: [1, 4]}
  - variants: [grpo_real]
"""


def write_spec(tmp_path: Path, text: str = SMALL_SPEC) -> Path:
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    return spec


def sweep_argv(spec: Path, root: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "wmrl.cli.main", "sweep", str(spec), f"runs_root={root}",
            f"tracking.uri=sqlite:///{root}/mlflow.db", *extra]


def run_cli(argv: list[str], timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def popen_cli(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with open(log, "wb") as out:
        return subprocess.Popen(argv, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)


def children(uri: str, parent: str) -> dict[str, list[object]]:
    """Live (not deleted) MLflow child runs of ``parent``, by run name."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_run(parent).info.experiment_id
    out: dict[str, list[object]] = {}
    for run in client.search_runs([exp], f"tags.mlflow.parentRunId = '{parent}'", max_results=10000):
        out.setdefault(run.info.run_name, []).append(run)
    return out
