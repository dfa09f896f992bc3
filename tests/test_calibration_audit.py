"""Assumption-6 audit: no alarm on a monotone stationary world model (with errors shared inside a group),
pure noise or a noise-free world model; clear warnings on non-monotone bias, drift, per-task bias and
missing coverage; warnings of a run need several consecutive flagged audits."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from wmrl.calibration.audit import AuditThresholds, audit_pool
from wmrl.calibration.calibrator import Calibrator
from wmrl.calibration.pool import AnchorPair
from wmrl.config import AlgorithmConfig

Phi = Callable[[np.ndarray], np.ndarray]


def synthetic(
    phi: Phi, n: int = 3000, noise: float = 0.1, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    r = rng.beta(2, 2, n)
    return np.clip(phi(r) + rng.normal(0, noise, n), 0, 1), r


def grouped(
    phi: Phi,
    groups: int = 400,
    n: int = 8,
    noise: float = 0.1,
    group_sd: float = 0.0,
    task_offset: float = 0.0,
    tasks: int = 16,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, list[str], list[str]]:
    """Pairs of GRPO groups: a task per group, n trajectories on a few of the task's score levels, a
    world-model error shared by the group (``group_sd``) and by the first half of the tasks."""
    rng = np.random.default_rng(seed)
    levels = rng.beta(2, 4, size=(tasks, 16))
    pred, true, gid, tid = [], [], [], []
    for g in range(groups):
        task = int(rng.integers(tasks))
        r = np.where(rng.random(n) < 0.2, 0.0, rng.choice(levels[task], n))
        offset = rng.normal(0, group_sd) + (task_offset if task < tasks // 2 else 0.0)
        pred.append(np.clip(phi(r) + offset + rng.normal(0, noise, n), 0, 1))
        true.append(r)
        gid += [f"g{g}"] * n
        tid += [f"task{task:02d}"] * n
    return np.concatenate(pred), np.concatenate(true), gid, tid


MONOTONE: dict[str, Phi] = {
    "affine": lambda r: 0.2 + 0.6 * r,
    "square": lambda r: r**2,
    "optimistic": lambda r: np.sqrt(r),
    "step": lambda r: (r > 0.5) * 0.6 + 0.2,
}
NON_MONOTONE: dict[str, Phi] = {
    "tent": lambda r: 1 - np.abs(2 * r - 1),
    "sine": lambda r: 0.5 + 0.4 * np.sin(2 * np.pi * r),
    "inverted": lambda r: 1 - r,
}


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", list(MONOTONE))
def test_monotone_stationary_bias_does_not_warn(name: str, seed: int) -> None:
    report = audit_pool(*synthetic(MONOTONE[name], seed=seed))
    # Assumption 6 holds; flat_top (issue 37) is not one of its checks: "step" is flat at the top
    assert not [f for f in report.flags if f != "flat_top"], report.warnings
    assert ("flat_top" in report.flags) == (name == "step")
    assert report.monotonicity_gain < 0.05


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_pure_noise_world_model_does_not_warn(seed: int) -> None:
    rng = np.random.default_rng(seed)
    report = audit_pool(rng.random(3000), rng.random(3000))
    assert report.flags == ["flat_top"], report.warnings  # no Assumption-6 warning; it cannot rank, though


@pytest.mark.parametrize("name", list(NON_MONOTONE))
def test_non_monotone_bias_warns(name: str) -> None:
    report = audit_pool(*synthetic(NON_MONOTONE[name]))
    assert not report.ok
    assert report.monotonicity_gain > 0.3 and report.monotonicity_z > 3
    assert any("non-monotone" in w and "cannot be trusted" in w for w in report.warnings)


def test_drifting_bias_warns_about_stationarity() -> None:
    old = synthetic(MONOTONE["square"], n=3000, seed=0)
    new = synthetic(MONOTONE["optimistic"], n=1000, seed=1)
    report = audit_pool(np.concatenate([old[0], new[0]]), np.concatenate([old[1], new[1]]))
    assert report.stationarity_window == 1000
    assert report.stationarity_gap > 0.15
    assert any("drifts" in w for w in report.warnings)
    assert not any("non-monotone" in w for w in report.warnings)


def test_improving_policy_under_a_fixed_bias_is_not_drift() -> None:
    rng = np.random.default_rng(0)
    r = np.concatenate([rng.beta(2, 5, 3000), rng.beta(5, 2, 1000)])  # the policy got better
    pred = np.clip(r**2 + rng.normal(0, 0.1, 4000), 0, 1)
    report = audit_pool(pred, r)
    assert report.ok, report.warnings
    assert report.map_lag_gap > 0.15  # ... but the pool-wide f_hat lags it, and the report says so


def test_policy_that_left_the_old_range_skips_the_drift_check() -> None:
    rng = np.random.default_rng(0)
    r = np.concatenate([rng.uniform(0, 0.5, 3000), rng.uniform(0.5, 1, 1000)])
    report = audit_pool(np.clip(r**2 + rng.normal(0, 0.1, 4000), 0, 1), r)
    assert np.isnan(report.stationarity_gap)
    assert any("moved too far" in s for s in report.skipped)


def test_stationary_bias_has_no_stationarity_gap() -> None:
    report = audit_pool(*synthetic(MONOTONE["square"], n=4000))
    assert report.stationarity_gap < 0.05


def test_uncovered_high_scores_warn() -> None:
    pred, true = synthetic(MONOTONE["affine"], noise=0.05)  # r_hat stays below ~0.9
    chased = np.full(200, 0.97)  # the policy now gets world-model scores no anchor has seen
    report = audit_pool(pred, true, chased=chased)
    assert report.n_support_high < 10
    assert any("do not cover" in w for w in report.warnings)


def test_covered_high_scores_report_support_and_high_fraction() -> None:
    pred, true = synthetic(MONOTONE["affine"])
    report = audit_pool(pred, true, chased=pred[-500:])
    assert report.n_support_high >= 0.09 * len(pred)
    assert report.high_true_frac == pytest.approx(
        np.mean(true[-report.stationarity_window :] >= 0.7)
    )


def test_too_few_pairs_skip_every_check() -> None:
    report = audit_pool(*synthetic(NON_MONOTONE["tent"], n=150))
    assert report.ok and np.isnan(report.monotonicity_gain)
    assert "only 150 anchor pairs" in report.skipped[0]


def test_too_few_groups_skip_every_check() -> None:
    pred, true = synthetic(NON_MONOTONE["tent"], n=400)
    report = audit_pool(pred, true, groups=[str(i % 10) for i in range(400)])
    assert report.ok and "in 10 groups" in report.skipped[0]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_errors_shared_within_groups_do_not_warn(seed: int) -> None:
    pred, true, groups, tasks = grouped(MONOTONE["optimistic"], noise=0.1, group_sd=0.2, seed=seed)
    report = audit_pool(pred, true, groups=groups, tasks=tasks)
    assert report.ok, report.warnings


def test_monotonicity_effect_is_in_score_units() -> None:
    pred, true, groups, tasks = grouped(NON_MONOTONE["sine"], noise=0.1)
    report = audit_pool(pred, true, groups=groups, tasks=tasks)
    # the isotonic fit of a sine of amplitude 0.4 misses a structure of RMS ~0.1-0.3 score units
    assert 0.05 < report.monotonicity_effect < 0.4
    assert "score units" in report.warnings[0]


def test_per_task_offset_is_named() -> None:
    pred, true, groups, tasks = grouped(MONOTONE["affine"], noise=0.1, task_offset=-0.2)
    report = audit_pool(pred, true, groups=groups, tasks=tasks)
    assert any("differs by task" in w for w in report.warnings)
    assert report.task_share > 0.2
    # calibrated minus true: the offset tasks (task00-07) come out below, the others above
    assert report.task_offsets
    assert all((int(name[4:]) < 8) == (v < 0) for name, v in report.task_offsets.items())


def test_task_bias_is_not_reported_without_task_offsets() -> None:
    pred, true, groups, tasks = grouped(MONOTONE["affine"], noise=0.1, group_sd=0.1)
    report = audit_pool(pred, true, groups=groups, tasks=tasks)
    assert report.task_p > 1e-3 and not report.task_offsets


def test_pairs_without_task_ids_skip_the_task_check() -> None:
    report = audit_pool(*synthetic(MONOTONE["affine"]))
    assert any(s.startswith("per-task bias") for s in report.skipped)


def test_noise_free_world_model_is_silent() -> None:
    pred, true, groups, tasks = grouped(MONOTONE["affine"], noise=0.0)
    report = audit_pool(pred, true, groups=groups, tasks=tasks)
    assert report.ok, report.warnings
    assert report.flags == []


def test_a_flag_warns_only_after_persisting() -> None:
    pred, true = synthetic(NON_MONOTONE["tent"])
    streaks: dict[str, int] = {}
    for _ in range(2):
        report = audit_pool(pred, true, streaks=streaks)
        assert report.flags[0] == "monotonicity" and report.ok  # (the tent is not monotone at the top either)
        streaks = report.streaks
    report = audit_pool(pred, true, streaks=streaks)
    assert not report.ok and "3 consecutive audits" in report.warnings[0]


def test_a_clean_audit_resets_the_streak() -> None:
    flagged = audit_pool(*synthetic(NON_MONOTONE["tent"]), streaks={}).streaks
    clean = audit_pool(*synthetic(MONOTONE["affine"]), streaks=flagged)
    assert flagged["monotonicity"] == 1 and clean.streaks["monotonicity"] == 0


def test_audit_rejects_bad_scores() -> None:
    with pytest.raises(ValueError, match="audit predicted"):
        audit_pool(np.array([0.5, 2.0] * 200), np.full(400, 0.5))


def test_thresholds_are_reported() -> None:
    t = AuditThresholds(max_monotonicity_ratio=0.2)
    assert (
        audit_pool(*synthetic(MONOTONE["affine"]), thresholds=t).thresholds.max_monotonicity_ratio
        == 0.2
    )


def tent_calibrator(directory: Path | None = None) -> Calibrator:
    pred, true = synthetic(NON_MONOTONE["tent"], n=512)
    cal = Calibrator(AlgorithmConfig(), directory)
    for s in range(0, 512, 64):
        cal.observe(
            [
                AnchorPair(
                    f"p{i}",
                    s // 64,
                    "task",
                    f"g{i // 8}",
                    f"t{i % 8}",
                    float(pred[i]),
                    float(true[i]),
                )
                for i in range(s, s + 64)
            ],
            s // 64,
        )
    return cal


def test_calibrator_audit_logs_its_warnings(caplog: pytest.LogCaptureFixture) -> None:
    cal = tent_calibrator()
    with caplog.at_level(logging.WARNING, logger="wmrl.calibration.calibrator"):
        reports = [cal.audit() for _ in range(3)]  # the persistence rule: 3 consecutive flags
    assert reports[0].ok and not reports[2].ok
    assert "non-monotone" in caplog.text


def test_audit_streaks_survive_a_restart(tmp_path: Path) -> None:
    cal = tent_calibrator(tmp_path)
    cal.audit()
    cal.audit()
    cal.save()
    assert not Calibrator.load(AlgorithmConfig(), tmp_path).audit().ok
