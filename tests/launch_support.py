"""Shared helpers of the launch/coordinator tests: a small, fast run of the anchored simulator whose
candidates are tiny Python scripts (``trainer=dry`` + ``python_work``): real workers, real
processes, real files, scores known exactly so that runs are deterministic."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from wmrl.config import WMRLConfig, load_config, to_yaml
from wmrl.io import read_json
from wmrl.storage.health import read_events
from wmrl.storage.rundir import RunDir, create_run_dir

REPO = Path(__file__).resolve().parents[1]

DRY = [
    "trainer=dry", "launch.work=wmrl.execution.work:python_work",
    "simulator.tasks=3", "simulator.candidates=4",
    "algorithm.groups_per_step=4", "algorithm.group_size=3", "algorithm.anchor_frac=0.25",
    "algorithm.min_pairs=6", "algorithm.refit_every=3", "algorithm.eta_window=6",
    "sandbox.timeout_s=20",
    "launch.timing.lease_s=6", "launch.timing.heartbeat_s=1", "launch.workers=2", "launch.timing.idle_timeout_s=30",
    "launch.timing.lock_stale_s=8", "launch.timing.lock_heartbeat_s=2",
]


def dry_config(root: Path, name: str, steps: int, *extra: str) -> WMRLConfig:
    return load_config(None, [f"run_name={name}", f"runs_root={root}", f"train.steps={steps}",
                              f"tracking.uri=sqlite:///{root}/mlflow.db", *DRY, *extra])


def mlflow_history(run: RunDir, tracking_uri: str, key: str) -> list[tuple[int, float]]:
    """(step, value) of one metric of the run's MLflow run, found by the id the coordinator saved."""
    from mlflow.tracking import MlflowClient

    run_id = (run.path / "mlflow_run_id").read_text().strip()
    return sorted((m.step, m.value) for m in MlflowClient(tracking_uri).get_metric_history(run_id, key))


def make_run(cfg: WMRLConfig) -> RunDir:
    return create_run_dir(cfg.run_dir, to_yaml(cfg))


def progress_step(run: RunDir) -> int:
    try:
        return int(read_json(run.path / "progress.json")["step"])
    except (OSError, ValueError, KeyError):
        return -1


def wait_until(what: str, condition: Callable[[], bool], timeout_s: float, every_s: float = 0.2) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(every_s)


def events(run: RunDir, name: str) -> list[dict]:
    return [e for e in read_events(run) if e["event"] == name]


def spawn_coordinator(run: RunDir) -> subprocess.Popen:
    """A coordinator in its own process (to signal or kill it like Slurm would)."""
    code = ("import sys; from wmrl.orchestration.coordinator import Coordinator; "
            "Coordinator(sys.argv[1])()")
    return subprocess.Popen([sys.executable, "-c", code, str(run.path)], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=open(run.logs / "spawned.stderr", "ab"),
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})


def final_digest(run: RunDir) -> str:
    return events(run, "ended")[-1]["digest"]


# --------------------------------------------------------------------------- the local Slurm cluster
USABLE_NODE_STATES = {"idle", "mixed", "allocated", "completing"}


def slurm_problem() -> str | None:
    """Why the local Slurm cluster cannot be used (None when it is up)."""
    import shutil

    if shutil.which("sinfo") is None:
        return "sinfo is not on PATH (slurm/install-local.sh, slurm/start-local.sh)"
    try:
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], capture_output=True, text=True, timeout=15,
                             check=False)
    except subprocess.TimeoutExpired:
        return "sinfo did not answer within 15 s (start the cluster with slurm/start-local.sh)"
    if out.returncode != 0 or not {s.rstrip("*~#") for s in out.stdout.split()} & USABLE_NODE_STATES:
        return f"the Slurm cluster is not up ({(out.stderr or out.stdout).strip()}); slurm/start-local.sh"
    return None


def require_slurm() -> None:
    """Skip without the local cluster, or fail where CI promised one (WMRL_REQUIRE_SLURM=1)."""
    import pytest

    problem = slurm_problem()
    if problem is not None:
        if os.environ.get("WMRL_REQUIRE_SLURM") == "1":
            pytest.fail(f"WMRL_REQUIRE_SLURM=1 but {problem}")
        # Only where no local Slurm runs (a dev box); CI starts one and sets WMRL_REQUIRE_SLURM=1 (fail above).
        pytest.skip(problem)


def squeue_gone(job_id: str) -> bool:
    out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True,
                         timeout=30, check=False)
    return not out.stdout.strip()


def uninterrupted_digest(root: Path, cfg: WMRLConfig) -> str:
    """Final digest of the same config run uninterrupted, locally (a fresh run directory)."""
    from wmrl.config import load_config as _load
    from wmrl.orchestration.coordinator import Coordinator

    ref = _load(None, [f"run_name={cfg.run_name}-reference", f"runs_root={root / 'reference'}",
                       f"train.steps={cfg.train.steps}", *DRY])
    run = make_run(ref)
    Coordinator(str(run.path))()
    return final_digest(run)
