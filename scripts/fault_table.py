"""Fault table (issue 8): inject each fault into a real run, relaunch, and record what the user saw and
what it cost. Writes results/faults/faults.md and faults.json.

    python scripts/fault_table.py [--out results/faults] [--only NAME ...] [--steps 6]

Every run is the plumbing dry run (`trainer=dry`, `launch.work=python_work`: real coordinator,
workers, spool, checkpoints, calibration; candidates are tiny scripts with known scores), compared
with the same config run without faults: the same final state digest means no execution was lost or
counted twice. Slurm rows need the local cluster (slurm/start-local.sh); they are skipped otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from launch_support import (
    dry_config,
    final_digest,
    make_run,
    progress_step,
    slurm_problem,
    spawn_coordinator,
    squeue_gone,
    wait_until,
)
from mlflow_server import MlflowServer, free_port

from wmrl.io import read_json
from wmrl.storage.rundir import RunDir

EXTRA = ["launch.timing.checkpoint_every_s=0.5", "launch.timing.idle_timeout_s=120"]


def wmrl(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wmrl.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, check=False, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})


def state_line(run: RunDir, key: str = "state") -> str:
    out = wmrl("status", str(run.path)).stdout
    lines = [line for line in out.splitlines() if line.startswith(key)]
    return lines[0][len(key):].strip() if lines else out.strip()


def outcome(run: RunDir, reference: dict[str, Any]) -> dict[str, Any]:
    progress = read_json(run.path / "progress.json")
    got, want = int(progress.get("executions", 0)), reference["executions"]
    ended = run.ended_reason()
    return {"finished": ended == "finished", "same_state_as_reference": ended == "finished"
            and final_digest(run) == reference["digest"], "executions": got, "reference_executions": want,
            "lost": max(0, want - got), "double_counted": max(0, got - want)}


def finish_local(run: RunDir) -> str:
    out = wmrl("launch", str(run.path))
    return f"relaunch rc {out.returncode}"


# --------------------------------------------------------------------------- faults


def worker_sigkill(root: Path, steps: int, reference: dict[str, Any]) -> dict[str, Any]:
    run = make_run(dry_config(root, "worker-kill", steps, *EXTRA))
    proc = spawn_coordinator(run)
    victim: dict[str, Any] = {}

    def busy_worker() -> bool:
        for beat in run.workers.glob("*.json"):
            data = read_json(beat)
            if data.get("current") and data.get("state") == "running":
                victim.update(data)
                return True
        return False

    wait_until("a worker holding a claim", busy_worker, 300, every_s=0.05)
    os.kill(int(victim["pid"]), signal.SIGKILL)
    time.sleep(1)
    saw = f"{state_line(run)}; workers: {state_line(run, 'workers')}"
    proc.wait(timeout=600)
    return {"fault": "worker SIGKILL (local)", "injected": f"kill -9 worker {victim['worker_id']} holding "
            f"{victim['current']}", "user_saw": saw, "relaunch": "none needed (lease expiry re-runs it)",
            **outcome(run, reference)}


def _kill_coordinator(run: RunDir, at_step: int) -> int:
    wait_until(f"step {at_step}", lambda: progress_step(run) >= at_step, 600)
    holder = read_json(run.lock_path)
    os.kill(int(holder["pid"]), signal.SIGKILL)
    return int(holder["pid"])


def coordinator_sigkill_local(root: Path, steps: int, reference: dict[str, Any]) -> dict[str, Any]:
    run = make_run(dry_config(root, "coord-kill-local", steps, *EXTRA))
    proc = spawn_coordinator(run)
    pid = _kill_coordinator(run, 2)
    proc.wait()
    saw = state_line(run)
    return {"fault": "coordinator SIGKILL (local)", "injected": f"kill -9 coordinator pid {pid} after step 2",
            "user_saw": saw, "relaunch": finish_local(run), **outcome(run, reference)}


def coordinator_sigkill_slurm(root: Path, steps: int, reference: dict[str, Any]) -> dict[str, Any]:
    from wmrl.orchestration.launch import submit_run
    from wmrl.slurm.client import WORKERS, cancel_jobs, load_jobs

    cfg = dry_config(root, "coord-kill-slurm", steps, *EXTRA, "launch.executor=slurm")
    run = make_run(cfg)
    coordinator, _workers = submit_run(cfg, run)
    pid = _kill_coordinator(run, 2)
    wait_until("the coordinator job to leave the queue", lambda: squeue_gone(coordinator), 120)
    saw = state_line(run)
    out = wmrl("launch", str(run.path))
    adopted = "adopted" in out.stdout
    try:
        wait_until("the relaunched run to end", run.is_ended, 600, every_s=1)
    finally:
        cancel_jobs([r.job_id for r in load_jobs(run)])
    arrays = [r.job_id for r in load_jobs(run) if r.kind == WORKERS]
    return {"fault": "coordinator SIGKILL (Slurm)", "injected": f"kill -9 coordinator job {coordinator} "
            f"(pid {pid}) after step 2", "user_saw": saw,
            "relaunch": f"rc {out.returncode}; worker arrays {arrays} ({'live one adopted' if adopted else 'new'})",
            **outcome(run, reference)}


def tracking_down_at_start(root: Path, steps: int, reference: dict[str, Any]) -> dict[str, Any]:
    server = MlflowServer(root / "mlflow-start", free_port())
    run = make_run(dry_config(root, "tracking-start", steps, *EXTRA, f"tracking.uri={server.uri}"))
    t0 = time.monotonic()
    proc = spawn_coordinator(run)
    rc = proc.wait(timeout=600)
    wall = time.monotonic() - t0
    saw = state_line(run, "tracking")
    server.start()
    try:
        synced = _sync_and_check(server, run, steps)
    finally:
        server.stop()
    return {"fault": "tracking server down at start", "injected": "tracking.uri -> a port nobody listens on",
            "user_saw": f"run rc {rc} in {wall:.0f} s; {saw}", "relaunch": synced, **outcome(run, reference)}


def tracking_down_mid_run(root: Path, steps: int, reference: dict[str, Any]) -> dict[str, Any]:
    server = MlflowServer(root / "mlflow-mid").start()
    try:
        run = make_run(dry_config(root, "tracking-mid", steps, *EXTRA, f"tracking.uri={server.uri}",
                                  "tracking.retry_every_s=2"))
        proc = spawn_coordinator(run)
        wait_until("step 2", lambda: progress_step(run) >= 2, 600)
        server.stop()
        rc = proc.wait(timeout=600)
        saw = state_line(run, "tracking")
        server.start()
        synced = _sync_and_check(server, run, steps)
    finally:
        server.stop()
    return {"fault": "tracking server down mid-run", "injected": "mlflow server killed after step 2",
            "user_saw": f"run rc {rc}; {saw}", "relaunch": synced, **outcome(run, reference)}


def _sync_and_check(server: MlflowServer, run: RunDir, steps: int) -> str:
    synced = wmrl("sync", str(run.path))
    return f"server (re)started, `wmrl sync` rc {synced.returncode}; every metric once: " \
           f"{_each_metric_once(server.uri, run, steps)}"


def _each_metric_once(uri: str, run: RunDir, steps: int) -> bool:
    """MLflow holds each metric of metrics.jsonl once per step: no step missing, none twice."""
    import math

    from mlflow.tracking import MlflowClient

    from wmrl.storage.metrics_log import read_rows

    run_id = (run.path / "mlflow_run_id").read_text().strip()
    client = MlflowClient(uri)
    rows = read_rows(run.path / "metrics.jsonl")
    keys = {k for row in rows.values() for k in row} - {"step", "timestamp_ms"}
    for key in keys:
        want = sorted(s for s, row in rows.items() if isinstance(row.get(key), (int, float))
                      and math.isfinite(row[key]))
        if sorted(m.step for m in client.get_metric_history(run_id, key)) != want:
            return False
    return len(rows) == steps and bool(keys)


def corrupt_results(root: Path, steps: int, reference: dict[str, Any]) -> dict[str, Any]:
    run = make_run(dry_config(root, "corrupt", steps, *EXTRA))
    corrupted: list[str] = []
    stop = threading.Event()

    def corrupter() -> None:  # overwrite the first results in place, as a broken NFS client might
        while not stop.is_set() and len(corrupted) < 3:
            for path in sorted(run.results.glob("*.json")):
                if path.name not in corrupted and len(corrupted) < 3:
                    path.write_bytes(b'{"request_id": "torn')
                    corrupted.append(path.name)
            time.sleep(0.005)

    thread = threading.Thread(target=corrupter, daemon=True)
    thread.start()
    proc = spawn_coordinator(run)
    proc.wait(timeout=600)
    stop.set()
    quarantined = len(list(run.quarantine.glob("*.reason")))
    return {"fault": "corrupt result files", "injected": f"{len(corrupted)} result files overwritten with junk",
            "user_saw": f"{state_line(run)}; queue: {state_line(run, 'queue')}",
            "relaunch": f"none needed ({quarantined} quarantined and re-run)", **outcome(run, reference)}


def deleted_calibration(root: Path, steps: int, reference: dict[str, Any], good_checkpoint: bool) -> dict[str, Any]:
    name = "calib-ckpt" if good_checkpoint else "calib-nockpt"
    run = make_run(dry_config(root, name, steps, *EXTRA))
    proc = spawn_coordinator(run)
    _kill_coordinator(run, 3)
    proc.wait()
    shutil.rmtree(run.path / "calibration")
    if not good_checkpoint:
        for manifest in (run.path / "checkpoints").glob("step-*/trainer.pkl"):
            manifest.write_bytes(b"bit rot")
    relaunch = wmrl("launch", str(run.path))
    loud = "restarting from step 0" in relaunch.stderr
    saw = "relaunch printed: " + (relaunch.stderr.strip().splitlines()[-1][:160] if loud else
                                  f"nothing unusual; resumed at step {_resumed_at(run)}")
    what = "calibration/ deleted after a kill -9 at step 3" + ("" if good_checkpoint else ", every checkpoint corrupt")
    return {"fault": f"deleted calibration state, {'good' if good_checkpoint else 'no good'} checkpoint",
            "injected": what, "user_saw": saw, "relaunch": f"rc {relaunch.returncode}", **outcome(run, reference)}


def _resumed_at(run: RunDir) -> Any:
    from wmrl.storage.health import read_events

    resumed = [e for e in read_events(run) if e["event"] == "resumed"]
    return resumed[-1]["checkpoint_step"] if resumed else None


FAULTS: dict[str, Callable[[Path, int, dict[str, Any]], dict[str, Any]]] = {
    "worker_sigkill": worker_sigkill,
    "coordinator_sigkill_local": coordinator_sigkill_local,
    "coordinator_sigkill_slurm": coordinator_sigkill_slurm,
    "tracking_down_at_start": tracking_down_at_start,
    "tracking_down_mid_run": tracking_down_mid_run,
    "corrupt_results": corrupt_results,
    "deleted_calibration_good_checkpoint": lambda r, s, ref: deleted_calibration(r, s, ref, True),
    "deleted_calibration_no_checkpoint": lambda r, s, ref: deleted_calibration(r, s, ref, False),
}


def reference_run(root: Path, steps: int) -> dict[str, Any]:
    from wmrl.orchestration.coordinator import Coordinator

    run = make_run(dry_config(root, "reference", steps, *EXTRA))
    Coordinator(str(run.path))()
    return {"digest": final_digest(run), "executions": int(read_json(run.path / "progress.json")["executions"])}


def render(rows: list[dict[str, Any]], steps: int) -> str:
    head = ("| fault | injected | what the user saw | relaunch / recovery | executions lost | double counted "
            "| run finished | final state = no-fault run |\n|---|---|---|---|---|---|---|---|\n")
    body = "".join(
        f"| {r['fault']} | {r['injected']} | {r['user_saw'].replace('|', '/')} | {r['relaunch']} | "
        f"{r.get('lost', '-')} | {r.get('double_counted', '-')} | {'yes' if r.get('finished') else 'NO'} | "
        f"{'yes' if r.get('same_state_as_reference') else 'no'} |\n" for r in rows)
    return (f"# Fault table (issue 8)\n\nRe-run: `python scripts/fault_table.py` (dry run, {steps} steps, "
            "2 local workers; Slurm rows on the local cluster). Executions are compared with the same config "
            "run without faults; 'final state' compares the coordinator's state digest at the end.\n\n"
            + head + body)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REPO / "results" / "faults"))
    parser.add_argument("--only", nargs="+", choices=list(FAULTS))
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="wmrl-faults-"))
    reference = reference_run(root, args.steps)
    rows = []
    for name in args.only or list(FAULTS):
        if "slurm" in name and slurm_problem():
            rows.append({"key": name, "fault": name, "injected": "-", "relaunch": "-",
                         "user_saw": f"skipped: {slurm_problem()}"})
            continue
        started = time.monotonic()
        try:
            row = FAULTS[name](root, args.steps, reference)
        except Exception as err:  # noqa: BLE001 - one broken scenario is a row, not the end of the table
            row = {"fault": name, "injected": "-", "user_saw": f"SCRIPT ERROR {type(err).__name__}: {err}",
                   "relaunch": "-"}
        row["key"], row["seconds"] = name, round(time.monotonic() - started, 1)
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.only and (out / "faults.json").is_file():  # re-run rows replace theirs, the others stay
        fresh = {r["key"]: r for r in rows}
        old = json.loads((out / "faults.json").read_text())["rows"]
        rows = [fresh.pop(r["key"], r) for r in old if "key" in r] + list(fresh.values())
        rows.sort(key=lambda r: list(FAULTS).index(r["key"]))
    (out / "faults.json").write_text(json.dumps({"steps": args.steps, "reference": reference, "rows": rows},
                                                indent=1) + "\n")
    (out / "faults.md").write_text(render(rows, args.steps))
    print(f"wrote {out / 'faults.md'}; run directories in {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
