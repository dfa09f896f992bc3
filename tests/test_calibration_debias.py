"""Online Debiasing (Eq. 4): schedule, hand-computed isotonic fits, properties, exact restore."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.isotonic import IsotonicRegression

from wmrl.calibration.debias import Debiaser, apply_map, fit_isotonic

unit = st.floats(0.0, 1.0, allow_nan=False)


def test_identity_before_min_pairs() -> None:
    deb = Debiaser(min_pairs=4, refit_every=2)
    assert not deb.update(np.array([0.1, 0.9, 0.5]), np.array([1.0, 0.0, 0.2]))
    x = np.array([0.0, 0.3, 1.0])
    assert deb(x).tolist() == x.tolist()


def test_first_fit_at_min_pairs_then_every_refit_every_new_pairs() -> None:
    deb = Debiaser(min_pairs=4, refit_every=3)
    rng = np.random.default_rng(0)
    pred, true = rng.random(20), rng.random(20)
    fitted_at = [n for n in range(1, 21) if deb.update(pred[:n], true[:n])]
    assert fitted_at == [4, 7, 10, 13, 16, 19]
    assert deb.n_refits == 6


def test_refit_happens_when_a_batch_crosses_the_threshold() -> None:
    deb = Debiaser(min_pairs=4, refit_every=3)
    rng = np.random.default_rng(0)
    pred, true = rng.random(20), rng.random(20)
    assert deb.update(pred[:6], true[:6])  # first fit at 6 >= 4
    assert not deb.update(pred[:8], true[:8])  # 2 new < 3
    assert deb.update(pred[:9], true[:9])


def test_isotonic_fit_matches_hand_computed_pooling() -> None:
    # r on r_hat: (0.1, 0.2), (0.2, 0.6), (0.3, 0.4), (0.4, 0.9): PAV pools the middle pair to 0.5.
    x, y = fit_isotonic(np.array([0.1, 0.2, 0.3, 0.4]), np.array([0.2, 0.6, 0.4, 0.9]))
    mapped = apply_map(x, y, np.array([0.0, 0.1, 0.2, 0.25, 0.3, 0.35, 0.4, 1.0]))
    assert mapped == pytest.approx([0.2, 0.2, 0.5, 0.5, 0.5, 0.7, 0.9, 0.9])


def test_map_continues_an_affine_world_model_exactly_beyond_its_end_knots() -> None:
    # noise-free r_hat = 0.2 + 0.6 r seen only for r in [0.1, 0.5]: r_hat = 0.62 (r = 0.7) is beyond the
    # last knot; sklearn's clip would say 0.5, the end region's slope (1/0.6) says 0.7
    r = np.linspace(0.1, 0.5, 50)
    deb = Debiaser(min_pairs=2, refit_every=1)
    deb.update(0.2 + 0.6 * r, r)
    assert deb(np.array([0.2 + 0.6 * 0.05, 0.62, 0.74])) == pytest.approx([0.05, 0.7, 0.9], abs=1e-12)


def test_map_beyond_the_ends_is_clipped_to_the_unit_interval() -> None:
    r = np.linspace(0.1, 0.5, 50)
    deb = Debiaser(min_pairs=2, refit_every=1)
    deb.update(0.2 + 0.6 * r, r)
    assert deb(np.array([0.0, 1.0])).tolist() == [0.0, 1.0]  # affine continuation: -1/3 and 4/3


def test_map_is_constant_beyond_an_end_whose_pairs_share_one_r_hat() -> None:
    # the lowest tenth of the pairs all have r_hat 0.2 (e.g. crashed solutions): no slope to continue
    pred = np.concatenate([np.full(20, 0.2), np.linspace(0.3, 0.8, 80)])
    true = np.concatenate([np.zeros(20), np.linspace(0.2, 0.9, 80)])
    deb = Debiaser(min_pairs=2, refit_every=1)
    deb.update(pred, true)
    assert deb(np.array([0.0, 0.1])).tolist() == [0.0, 0.0]


def test_map_never_decreases_beyond_the_ends() -> None:
    # the highest pairs' true scores fall with r_hat: the continuation is flat, not decreasing
    pred = np.linspace(0.1, 0.9, 100)
    true = np.concatenate([np.linspace(0.0, 0.8, 90), np.linspace(0.8, 0.3, 10)])
    deb = Debiaser(min_pairs=2, refit_every=1)
    deb.update(pred, true)
    top = deb(np.array([0.9, 0.95, 1.0]))
    assert top[1] == top[0] == top[2]


def test_map_agrees_with_sklearn_predict_between_its_end_knots() -> None:
    rng = np.random.default_rng(1)
    r = rng.random(3000)
    r_hat = np.clip(r**2 + rng.normal(0, 0.1, 3000), 0, 1)
    deb = Debiaser(min_pairs=10, refit_every=10)
    deb.update(r_hat, r)
    iso = IsotonicRegression(increasing=True, y_min=0, y_max=1, out_of_bounds="clip").fit(r_hat, r)
    grid = np.linspace(r_hat.min(), r_hat.max(), 1001)  # beyond the end knots the debiaser extrapolates
    np.testing.assert_allclose(deb(grid), iso.predict(grid), rtol=0, atol=1e-12)


def test_map_agrees_with_sklearn_predict_on_tied_world_model_scores() -> None:
    rng = np.random.default_rng(2)
    r = rng.random(2000)
    r_hat = np.round(np.clip(r**0.5 + rng.normal(0, 0.2, 2000), 0, 1), 2)  # 101 distinct values
    x, y = fit_isotonic(r_hat, r)
    iso = IsotonicRegression(increasing=True, y_min=0, y_max=1, out_of_bounds="clip").fit(r_hat, r)
    grid = np.linspace(0, 1, 1001)
    np.testing.assert_allclose(apply_map(x, y, grid), iso.predict(grid), rtol=0, atol=1e-12)
    assert len(x) == len(iso.X_thresholds_)


@pytest.mark.parametrize("bad", [[0.5, float("nan")], [1.5], [-0.1]])
def test_calibrating_bad_scores_is_rejected(bad: list[float]) -> None:
    with pytest.raises(ValueError, match=r"r_hat.*outside \[0, 1\] or NaN"):
        Debiaser()(np.array(bad))


@settings(max_examples=60, deadline=None)
@given(
    pairs=st.lists(st.tuples(unit, unit), min_size=2, max_size=200),
    queries=st.lists(unit, min_size=1, max_size=50),
)
def test_fitted_map_is_monotone_and_maps_into_unit_interval(
    pairs: list[tuple[float, float]], queries: list[float]
) -> None:
    deb = Debiaser(min_pairs=2, refit_every=1)
    pred, true = np.array(pairs).T
    deb.update(pred, true)
    q = np.sort(np.array(queries))
    out = deb(q)
    assert np.all((out >= 0.0) & (out <= 1.0))
    assert np.all(np.diff(out) >= 0.0)


def test_restored_debiaser_maps_every_input_bit_identically() -> None:
    rng = np.random.default_rng(2)
    r = rng.random(5000)
    r_hat = np.clip(0.3 + 0.5 * r + rng.normal(0, 0.15, 5000), 0, 1)
    deb = Debiaser(min_pairs=200, refit_every=64)
    deb.update(r_hat, r)
    state = json.loads(json.dumps(deb.to_state()))  # through the on-disk text form
    restored = Debiaser.from_state(state, min_pairs=200, refit_every=64)
    grid = np.concatenate([np.linspace(0, 1, 100_001), r_hat])
    assert deb(grid).tobytes() == restored(grid).tobytes()
    assert (restored.n_at_fit, restored.n_refits) == (5000, 1)


def test_restored_identity_debiaser_stays_identity() -> None:
    restored = Debiaser.from_state(Debiaser().to_state(), min_pairs=200, refit_every=64)
    assert not restored.fitted
    assert restored(np.array([0.25])).tolist() == [0.25]
