"""Benchmark: latencies of the local development/CI Slurm cluster (slurm/start-local.sh).

Measures, on the running cluster (as root):
- start from stopped: `slurm/stop-local.sh` then `slurm/start-local.sh` (skipped with --no-restart);
- sbatch -> job start: submit time to the first line the job's script runs (a timestamp the job
  writes itself, so polling does not blur it), for single jobs and for a 4-task array (last task);
- job end -> sacct reports COMPLETED (what submitit waits on);
- `slurm/requeue-now.sh`: requeue request -> the job's script runs again.

    python benchmarks/bench_slurm_local.py [--jobs 10] [--no-restart] [--install-seconds S]

--install-seconds records a first-time `slurm/install-local.sh` duration measured by hand (the
benchmark does not uninstall packages to time it). Writes results/bench_slurm_local.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from tqdm import tqdm

from wmrl.io import atomic_write_json, atomic_write_text

REPO = Path(__file__).resolve().parents[1]
SLURM = REPO / "slurm"


def run(*cmd: str | Path, timeout: float = 120) -> str:
    done = subprocess.run(
        [str(c) for c in cmd], check=False, capture_output=True, text=True, timeout=timeout
    )
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, cmd))} failed ({done.returncode}): {done.stderr}")
    return done.stdout


def wait_until(check, timeout: float, what: str, poll: float = 0.05) -> float:
    """Poll `check` until true; returns the time.time() at which it was first seen true."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout} s waiting for {what}")
        time.sleep(poll)
    return time.time()


def stamps(path: Path) -> list[float]:
    return [float(x) for x in path.read_text().split()] if path.exists() else []


def summary(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "median_s": round(statistics.median(values), 3),
        "max_s": round(max(values), 3),
        "min_s": round(min(values), 3),
    }


def sbatch(workdir: Path, script: str, *options: str) -> tuple[str, float]:
    path = workdir / f"job{time.monotonic_ns()}.sh"
    path.write_text("#!/bin/bash\n" + script)
    submitted = time.time()
    out = run("sbatch", "--parsable", f"--chdir={workdir}", "--output=/dev/null", *options, path)
    return out.strip().split(";")[0], submitted


def left_queue(job: str) -> bool:
    return not run("squeue", "-h", "-j", job).strip()


def sacct_state(job: str) -> str:
    out = run("sacct", "-n", "-X", "-P", "-j", job, "-o", "State")
    return out.strip().splitlines()[0] if out.strip() else ""


def bench_single_jobs(workdir: Path, n: int) -> tuple[list[float], list[float]]:
    """Submit -> start, and end -> sacct COMPLETED, for n sequential one-line jobs."""
    to_start, to_sacct = [], []
    for k in tqdm(range(n), desc="single jobs"):
        stamp = workdir / f"single{k}"
        job, submitted = sbatch(workdir, f"date +%s.%N > {stamp}\n")
        wait_until(lambda s=stamp: bool(stamps(s)), 60, f"job {job} to start")
        to_start.append(stamps(stamp)[0] - submitted)
        ended = wait_until(lambda j=job: left_queue(j), 60, f"job {job} end")
        seen = wait_until(lambda j=job: sacct_state(j) == "COMPLETED", 60, f"sacct for {job}", 0.1)
        to_sacct.append(seen - ended)
    return to_start, to_sacct


def bench_array(workdir: Path, n: int) -> list[float]:
    """Submit -> the last of 4 array tasks started."""
    results = []
    for k in tqdm(range(n), desc="4-task arrays"):
        prefix = workdir / f"array{k}_"
        job, submitted = sbatch(
            workdir, f"date +%s.%N > {prefix}$SLURM_ARRAY_TASK_ID\n", "--array=0-3"
        )
        files = [Path(f"{prefix}{i}") for i in range(4)]
        wait_until(lambda fs=files: all(stamps(f) for f in fs), 60, f"array {job} to start")
        results.append(max(stamps(f)[0] for f in files) - submitted)
        wait_until(lambda j=job: left_queue(j), 60, f"array {job} end")
    return results


def bench_requeue_now(workdir: Path, n: int) -> list[float]:
    results = []
    for k in tqdm(range(n), desc="requeue-now"):
        stamp = workdir / f"requeue{k}"
        job, _ = sbatch(workdir, f"date +%s.%N >> {stamp}\nsleep 300\n", "--requeue")
        wait_until(lambda s=stamp: len(stamps(s)) == 1, 60, f"job {job} to start")
        asked = time.time()
        run(SLURM / "requeue-now.sh", job)
        wait_until(lambda s=stamp: len(stamps(s)) == 2, 60, f"job {job} to restart")
        results.append(stamps(stamp)[1] - asked)
        run("scancel", job)
    return results


def bench_restart() -> float:
    run(SLURM / "stop-local.sh")
    t0 = time.monotonic()
    run(SLURM / "start-local.sh", timeout=300)
    return time.monotonic() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10, help="repetitions per measurement")
    parser.add_argument("--no-restart", action="store_true", help="do not time stop + start")
    parser.add_argument(
        "--install-seconds",
        type=float,
        default=None,
        help="first-time install-local.sh duration measured by hand",
    )
    parser.add_argument("--out", type=Path, default=REPO / "results" / "bench_slurm_local")
    args = parser.parse_args()

    result: dict = {"host": platform.node(), "slurm": run("sinfo", "--version").strip()}
    if args.install_seconds is not None:
        result["install_first_time_s"] = args.install_seconds
    if not args.no_restart:
        result["start_from_stopped_s"] = round(bench_restart(), 3)
    with tempfile.TemporaryDirectory(prefix="bench-slurm-") as tmp:
        workdir = Path(tmp)
        to_start, to_sacct = bench_single_jobs(workdir, args.jobs)
        result["sbatch_to_job_start"] = summary(to_start)
        result["job_end_to_sacct_completed"] = summary(to_sacct)
        result["sbatch_to_last_of_4_array_tasks_start"] = summary(bench_array(workdir, args.jobs))
        result["requeue_now_to_restart"] = summary(bench_requeue_now(workdir, min(args.jobs, 3)))

    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(args.out.with_suffix(".json"), result)
    lines = [
        "# Local Slurm cluster latencies",
        "",
        f"`{result['slurm']}` on `{result['host']}`.",
        "",
        "| measurement | value |",
        "| --- | --- |",
    ]
    for key, value in result.items():
        if key in ("host", "slurm"):
            continue
        text = (
            f"median {value['median_s']} s, max {value['max_s']} s (n={value['n']})"
            if isinstance(value, dict)
            else f"{value} s"
        )
        lines.append(f"| {key} | {text} |")
    atomic_write_text(args.out.with_suffix(".md"), "\n".join(lines) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
