"""`wmrl launch configs/e2e-slurm.yaml --wait` on the local Slurm: coordinator job + worker array,
anchors in bwrap, graded; the same evidence in the run dir as the local e2e run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from launch_support import REPO, slurm_problem
from test_launch_e2e import check_e2e_run_dir

from wmrl.slurm.client import load_jobs
from wmrl.storage.rundir import RunDir
from wmrl.storage.spool import Spool

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.timeout(600)]


def test_wmrl_launch_e2e_slurm_runs_coordinator_and_worker_array_to_the_end(tmp_path):
    problem = slurm_problem()
    if problem is not None:
        if os.environ.get("WMRL_REQUIRE_SLURM") == "1":
            pytest.fail(f"WMRL_REQUIRE_SLURM=1 but {problem}")
        pytest.skip(problem)
    if shutil.which("bwrap") is None:
        # Only on a dev box without bubblewrap; CI installs it with the cluster (slurm/install-local.sh).
        pytest.skip("bubblewrap (bwrap) is not installed")
    out = subprocess.run(
        [sys.executable, "-m", "wmrl.cli.main", "launch", str(REPO / "configs" / "e2e-slurm.yaml"),
         f"runs_root={tmp_path}", f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", "--wait", "--every", "5"],
        cwd=REPO, capture_output=True, text=True, timeout=580, check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    run = RunDir(tmp_path / "e2e-slurm")
    jobs = {r.kind: r.job_id for r in load_jobs(run)}
    assert sorted(jobs) == ["coordinator", "workers"]
    check_e2e_run_dir(run, steps=6)
    spool = Spool(run)
    workers = {spool.read_result(rid).worker_id for rid in spool.done_ids()}
    assert all(f"-{jobs['workers']}_" in w for w in workers)  # executed by the array's tasks
    assert f"coordinator {jobs['coordinator']}" in out.stdout and "ended (finished)" in out.stdout
