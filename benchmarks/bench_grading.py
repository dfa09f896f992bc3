"""Grading time per task (validation + metric + leaderboard position), outside the sandbox.

For every task of the pool, three submissions are graded ``--repeats`` times each: the sample
submission (valid, weak), the answers themselves (valid, perfect) and a shuffled copy of the
answers with one id missing (invalid). Adversarial files are timed once: one just under the size
cap (parsed, then rejected for its row count) and one over it (rejected without being read).

    python benchmarks/bench_grading.py [--root POOL] [--repeats 20]

Writes results/bench_grading.json and results/bench_grading.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

from tqdm import tqdm

from wmrl.grading.grader import grade_submission
from wmrl.grading.validate import DEFAULT_MAX_BYTES
from wmrl.io import atomic_write_json, atomic_write_text
from wmrl.tasks.pool import ensure_builtin_pool, load_pool


def _time(task, path: Path, repeats: int, max_bytes: int = DEFAULT_MAX_BYTES) -> tuple[list[float], bool]:
    times, valid = [], False
    for _ in range(repeats):
        start = time.perf_counter()
        grade = grade_submission(task, path, max_bytes)
        times.append(time.perf_counter() - start)
        valid = grade.valid
    return times, valid


def bench_task(task, scratch: Path, repeats: int) -> dict:
    answers = task.answers()
    cases = {"sample": task.sample_submission_path}
    perfect = scratch / f"{task.task_id}-perfect.csv"
    answers[[task.id_column, *task.target_columns]].to_csv(perfect, index=False)
    cases["perfect"] = perfect
    broken = scratch / f"{task.task_id}-broken.csv"
    answers[[task.id_column, *task.target_columns]].sample(frac=1, random_state=0).iloc[1:].to_csv(broken, index=False)
    cases["invalid"] = broken
    out: dict = {"task_id": task.task_id, "metric": task.metric_name, "rows": len(answers),
                 "leaderboard": len(task.leaderboard)}
    all_times = []
    for name, path in cases.items():
        times, valid = _time(task, path, repeats)
        all_times += times
        out[f"{name}_median_ms"] = round(1000 * statistics.median(times), 3)
        out[f"{name}_valid"] = valid
    out["median_ms"] = round(1000 * statistics.median(all_times), 3)
    out["max_ms"] = round(1000 * max(all_times), 3)
    return out


def bench_adversarial(task, scratch: Path, cap_mb: int) -> dict:
    cap = cap_mb << 20
    big = scratch / "big.csv"
    row = f"{task.answers()[task.id_column].iloc[0]}," + ",".join(["0.5"] * len(task.target_columns)) + "\n"
    header = ",".join([task.id_column, *task.target_columns]) + "\n"
    big.write_text(header + row * ((cap - len(header) - 1024) // len(row)))
    under, _ = _time(task, big, 1, cap)
    over_path = scratch / "over.csv"
    with over_path.open("wb") as handle:
        handle.truncate(cap + 1)  # sparse file: costs no disk
    over, _ = _time(task, over_path, 1, cap)
    return {"cap_mb": cap_mb, "just_under_cap_ms": round(1000 * under[0], 1), "over_cap_ms": round(1000 * over[0], 3)}


def to_markdown(report: dict) -> str:
    lines = [
        "# Grading time per task", "",
        (f"Machine: {report['machine']['cpus']} CPUs, load average {report['machine']['loadavg']} at start; "
        f"{report['repeats']} repeats per submission."), "",
        ("Grading = read answers and leaderboard, validate the submission, compute the metric, place it on the "
        "leaderboard. `sample`/`perfect` are valid submissions, `invalid` lacks one id."), "",
        "| task | metric | rows | leaderboard | median ms (all) | sample | perfect | invalid | max ms |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["tasks"]:
        lines.append(f"| {r['task_id']} | {r['metric']} | {r['rows']} | {r['leaderboard']} | {r['median_ms']} | "
                     f"{r['sample_median_ms']} | {r['perfect_median_ms']} | {r['invalid_median_ms']} | {r['max_ms']} |")
    s = report["summary"]
    a = report["adversarial"]
    lines += ["", (f"Median over tasks of the per-task median: **{s['median_of_medians_ms']} ms**; "
              f"slowest task median {s['max_of_medians_ms']} ms."), "",
              (f"Adversarial: a submission just under the {a['cap_mb']} MB cap is parsed and rejected in "
              f"{a['just_under_cap_ms']} ms; one over the cap is rejected without reading in {a['over_cap_ms']} ms."), ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", help="task pool (default: the built-in pool)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--cap-mb", type=int, default=DEFAULT_MAX_BYTES >> 20)
    parser.add_argument("--out", default="results/bench_grading")
    args = parser.parse_args()
    tasks = load_pool(Path(args.root) if args.root else ensure_builtin_pool())
    report: dict = {"repeats": args.repeats, "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                                         "loadavg": round(os.getloadavg()[0], 2)}, "tasks": []}
    with tempfile.TemporaryDirectory(prefix="wmrl-bench-grading-") as scratch:
        for task in tqdm(tasks, desc="grading", unit="task"):
            report["tasks"].append(bench_task(task, Path(scratch), args.repeats))
        report["adversarial"] = bench_adversarial(tasks[0], Path(scratch), args.cap_mb)
    medians = [r["median_ms"] for r in report["tasks"]]
    report["summary"] = {"median_of_medians_ms": round(statistics.median(medians), 3),
                         "max_of_medians_ms": round(max(medians), 3)}
    out = Path(args.out)
    atomic_write_json(out.with_suffix(".json"), report)
    atomic_write_text(out.with_suffix(".md"), to_markdown(report))
    print(to_markdown(report))


if __name__ == "__main__":
    main()
