"""Inverse-Variance Denoising: eta2, its normaliser, eta2_cal, rho and the degenerate cases."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wmrl.calibration.denoise import (
    RESOLUTION,
    Denoiser,
    normalised_residual,
    rho_from,
    spread_normaliser,
    within_group_variance,
)


def test_within_group_variance_is_mean_of_population_variances() -> None:
    # group a: {0, 1} -> var 0.25; group b: {0.2, 0.4, 0.6} -> var 0.08/3; group c alone: ignored
    true = np.array([0.0, 1.0, 0.2, 0.4, 0.6, 0.9])
    groups = ["a", "a", "b", "b", "b", "c"]
    assert within_group_variance(true, groups) == pytest.approx((0.25 + 0.08 / 3) / 2)


def test_within_group_variance_is_nan_without_a_group_of_two() -> None:
    assert np.isnan(within_group_variance(np.array([0.1, 0.2]), ["a", "b"]))


def test_normaliser_falls_back_to_window_variance_when_groups_are_constant() -> None:
    true = np.array([0.0, 0.0, 1.0, 1.0])
    assert spread_normaliser(true, ["a", "a", "b", "b"]) == pytest.approx(0.25)


def test_normalised_residual_matches_hand_computation() -> None:
    calibrated = np.array([0.5, 0.5, 0.3, 0.3])
    true = np.array([0.0, 1.0, 0.2, 0.6])
    # mse = (0.25 + 0.25 + 0.01 + 0.09) / 4 = 0.15; within-group var = (0.25 + 0.04) / 2 = 0.145
    assert normalised_residual(calibrated, true, ["a", "a", "b", "b"]) == pytest.approx(
        0.15 / 0.145
    )


def test_normalised_residual_is_undefined_without_any_spread() -> None:
    assert normalised_residual(np.array([0.1, 0.9]), np.array([0.5, 0.5]), ["a", "a"]) is None


def test_equal_scores_whose_mean_is_not_exact_have_no_spread() -> None:
    """Three 0.7s have a float variance of 1e-32 (their mean is not exactly 0.7); normalising by it put
    eta2 at 2.3e30 in the e2e-local run. Rounding is no spread: the window says nothing."""
    true = np.array([0.7, 0.7, 0.7, 0.7, 0.7, 0.7])
    groups = ["a", "a", "a", "b", "b", "b"]
    assert float(np.var(true)) > 0.0  # the float rounding the check has to see through
    assert spread_normaliser(true, groups) == 0.0
    assert normalised_residual(np.full(6, 0.6), true, groups) is None


@pytest.mark.parametrize(
    ("eta2", "eta2_cal", "w_max", "expected"),
    [
        (0.5, 1.0, 4.0, 1.5),
        (1.0, 1.0, 4.0, 2.0),
        (10.0, 1.0, 4.0, 4.0),
        (0.0, 1.0, 4.0, 1.0),
        (3.0, 1.0, 1.0, 1.0),
    ],
)
def test_rho_is_clipped_one_plus_ratio(
    eta2: float, eta2_cal: float, w_max: float, expected: float
) -> None:
    assert rho_from(eta2, eta2_cal, w_max) == pytest.approx(expected)


def test_rho_refuses_an_unfloored_eta2_cal() -> None:
    with pytest.raises(ValueError, match="eta2_cal"):
        rho_from(0.0, 0.0, 4.0)


def test_noise_free_world_model_keeps_rho_at_one() -> None:
    # float rounding and interpolation error (1e-8 score units) are not noise: eta2_cal is floored at
    # RESOLUTION (score units), so a later residual of the same size leaves rho at 1
    d = Denoiser(w_max=4.0)
    _, true, groups = window()
    d.update(true + 1e-16, true, groups, warmed_up=True)
    d.update(true + 6e-8, true, groups, warmed_up=True)
    assert d.rho == pytest.approx(1.0, abs=1e-9)


def test_residual_of_one_resolution_after_a_noise_free_warm_up_gives_rho_two() -> None:
    d = Denoiser(w_max=4.0)
    _, true, groups = window()
    d.update(true.copy(), true, groups, warmed_up=True)
    d.update(true + RESOLUTION, true, groups, warmed_up=True)
    assert d.rho == pytest.approx(2.0)


def test_eta2_cal_is_not_floored_above_the_resolution() -> None:
    d = Denoiser(w_max=4.0)
    _, true, groups = window()
    d.update(true + 0.1, true, groups, warmed_up=True)
    assert d.eta2_cal == pytest.approx(d.eta2)


@settings(max_examples=200, deadline=None)
@given(
    eta2=st.floats(0.0, 1e6, allow_nan=False),
    eta2_cal=st.floats(1e-12, 1e6, allow_nan=False),
    w_max=st.floats(1.0, 100.0, allow_nan=False),
)
def test_rho_stays_between_one_and_w_max(eta2: float, eta2_cal: float, w_max: float) -> None:
    assert 1.0 <= rho_from(eta2, eta2_cal, w_max) <= w_max


def window() -> tuple[np.ndarray, np.ndarray, list[str]]:
    true = np.array([0.0, 1.0, 0.2, 0.6])
    return true, true.copy(), ["a", "a", "b", "b"]


def test_rho_is_one_before_warm_up() -> None:
    d = Denoiser(w_max=4.0)
    calibrated, true, groups = window()
    d.update(calibrated + 0.3 * (calibrated < 0.5), true, groups, warmed_up=False)
    assert (d.rho, d.eta2, d.eta2_cal) == (1.0, None, None)


def test_eta2_cal_is_fixed_at_first_update_after_warm_up() -> None:
    d = Denoiser(w_max=4.0)
    _, true, groups = window()
    d.update(np.array([0.5, 0.5, 0.3, 0.3]), true, groups, warmed_up=True)
    first = d.eta2_cal
    assert d.rho == pytest.approx(2.0)  # eta2 == eta2_cal at calibration time
    d.update(np.array([0.0, 1.0, 0.2, 0.6]), true, groups, warmed_up=True)  # perfect fit now
    assert d.eta2_cal == first
    assert d.eta2 == 0.0 and d.rho == 1.0


def test_window_without_spread_leaves_eta2_and_rho_unchanged() -> None:
    d = Denoiser(w_max=4.0, eta2=0.3, eta2_cal=0.2, rho=2.5)
    d.update(np.array([0.1, 0.9]), np.array([0.5, 0.5]), ["a", "a"], warmed_up=True)
    assert (d.eta2, d.eta2_cal, d.rho) == (0.3, 0.2, 2.5)


def test_state_round_trip_keeps_everything() -> None:
    d = Denoiser(w_max=3.0, eta2=0.123456789012345, eta2_cal=0.1, rho=2.23456789, n_updates=7)
    assert Denoiser.from_state(d.to_state(), w_max=3.0) == d
