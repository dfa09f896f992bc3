"""Variants x seeds of one simulator config, in parallel processes, with a progress bar."""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from wmrl.algorithm import VARIANTS
from wmrl.progress import progress_display
from wmrl.simulate.config import TestbedRunConfig
from wmrl.simulate.simulator import RunResult, train


@dataclass
class SweepResult:
    runs: list[RunResult]  # ordered by (variant order given, seed)
    wall_seconds: float
    workers: int
    load_average: tuple[float, float] = (float("nan"), float("nan"))  # 1-minute load at start and end


def _job(args: tuple[TestbedRunConfig, str, int, Path | None]) -> RunResult:
    cfg, variant, seed, pool_root = args
    # The audit's verdict is in the run's result (and the table); its log lines would break the bar.
    logging.getLogger("wmrl.calibration").setLevel(logging.ERROR)
    return train(cfg, variant, seed, pool_root)


def check_variants(names: Sequence[str]) -> list[str]:
    unknown = [v for v in names if v not in VARIANTS]
    if unknown or not names:
        raise ValueError(f"unknown variant(s) {', '.join(unknown) or '(none given)'}; choose from: {', '.join(VARIANTS)}")
    return list(dict.fromkeys(names))


def run_sweep(
    cfg: TestbedRunConfig,
    variants: Sequence[str] = VARIANTS,
    seeds: Sequence[int] = range(5),
    workers: int = 2,
    on_result: Callable[[RunResult], None] | None = None,
    progress: bool | None = None,
    desc: str = "simulate",
    pool_root: Path | None = None,
) -> SweepResult:
    """Train every (variant, seed); ``on_result`` sees each run as it finishes (in this process);
    ``pool_root``: keep each run's anchor pairs there (``train``)."""
    variants = check_variants(variants)
    sweep = run_jobs([(cfg, v, int(s), pool_root) for v in variants for s in seeds], workers, on_result,
                     progress, desc)
    order = {v: i for i, v in enumerate(variants)}
    sweep.runs.sort(key=lambda r: (order[r.variant], r.seed))
    return sweep


def _indexed_job(item: tuple[int, tuple[TestbedRunConfig, str, int, Path | None]]) -> tuple[int, RunResult]:
    return item[0], _job(item[1])


def run_jobs(
    jobs: Sequence[tuple[TestbedRunConfig, str, int, Path | None]],
    workers: int = 2,
    on_result: Callable[[RunResult], None] | None = None,
    progress: bool | None = None,
    desc: str = "simulate",
) -> SweepResult:
    """Train every ``(config, variant, seed, pool_root)`` job (configs may differ: a grid); the runs come
    back in the order of the jobs."""
    started, load_start = time.perf_counter(), _load()
    results: dict[int, RunResult] = {}
    bar = progress_display(len(jobs), desc, "run", show=progress)
    if workers <= 1:
        stream = map(_indexed_job, enumerate(jobs))
        pool = None
    else:
        # fork: workers inherit the imported modules, so a run starts in milliseconds
        ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else mp.get_context()
        pool = ctx.Pool(processes=workers)
        stream = pool.imap_unordered(_indexed_job, enumerate(jobs))
    try:
        for index, result in stream:
            results[index] = result
            if on_result is not None:
                on_result(result)
            bar.update(1)
    finally:
        bar.close()
        if pool is not None:
            pool.close()
            pool.join()
    return SweepResult(runs=[results[i] for i in range(len(jobs))], wall_seconds=time.perf_counter() - started,
                       workers=workers, load_average=(load_start, _load()))


def _load() -> float:
    """The 1-minute load average (NaN where the OS has none): wall times mean little without it."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")
