"""`wmrl sweep --executor slurm` on the real local Slurm: one job per run, a throttle, and a killed
driver re-issued completes the sweep without re-running finished runs."""

from __future__ import annotations

import signal
import time

import pytest
from sweep_support import children, popen_cli, run_cli, sweep_argv, write_spec
from test_slurm_launch import cluster  # noqa: F401 - its module fixture: skip (or fail on CI) without Slurm

from wmrl.io import read_json

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(400)]

SPEC = """\
name: small
kind: simulate
config: configs/simulate.yaml
overrides: [train.steps=30, simulator.log_every=10, tracking.experiment=sweep-test]
seeds: [0, 1, 2]
groups:
  - variants: [wmrl, grpo_real]
"""


def test_killed_slurm_sweep_reissued_skips_finished_runs(tmp_path):
    argv = sweep_argv(write_spec(tmp_path, SPEC), tmp_path, "--executor", "slurm", "--max-parallel", "2")
    proc = popen_cli(argv, tmp_path / "first.log")
    runs = tmp_path / "sweeps" / "small" / "runs"
    deadline = time.monotonic() + 240
    while len(list(runs.glob("*/mlflow.json"))) < 2:
        assert proc.poll() is None, (tmp_path / "first.log").read_text()
        assert time.monotonic() < deadline, (tmp_path / "first.log").read_text()
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = {p.parent.name: p.stat().st_mtime_ns for p in runs.glob("*/result.json")}
    jobs_before = {p.parent.name: read_json(p)["job_id"] for p in runs.glob("*/sweep-job.json")}
    assert len(jobs_before) <= 4  # the throttle: 2 at a time, the killed driver submitted at most 2 more

    done = run_cli(argv, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    after = {p.parent.name: p.stat().st_mtime_ns for p in runs.glob("*/result.json")}
    assert len(after) == 6
    assert all(after[name] == before[name] for name in before)  # finished runs were not run again
    jobs_after = {p.parent.name: read_json(p)["job_id"] for p in runs.glob("*/sweep-job.json")}
    assert all(jobs_after[name] == job for name, job in jobs_before.items())  # nor resubmitted
    parent = read_json(tmp_path / "sweeps" / "small" / "sweep.json")["parent_run_id"]
    kids = children(f"sqlite:///{tmp_path}/mlflow.db", parent)
    assert sorted(kids) == sorted(after) and all(len(v) == 1 for v in kids.values())
