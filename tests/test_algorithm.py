"""The pure algorithm layer: variants, anchor choice, advantages (Eq. 1/2), fused weights (Eq. 5)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wmrl.algorithm import (
    anchor_mask,
    choose_anchor_groups,
    get_variant,
    group_advantages,
    group_weights,
    n_anchor_groups,
    stream_weights,
    training_scores,
)
from wmrl.config import VARIANTS


def test_every_config_variant_has_an_algorithm_variant() -> None:
    assert [get_variant(name).name for name in VARIANTS] == list(VARIANTS)


def test_unknown_variant_lists_the_allowed_ones() -> None:
    with pytest.raises(ValueError, match="unknown variant 'wmrI'.*grpo_real.*wmrl"):
        get_variant("wmrI")


@pytest.mark.parametrize(
    ("name", "debias", "denoise", "trains_on_wm"),
    [
        ("grpo_real", False, False, False),
        ("grpo_anchor_only", False, False, False),
        ("pure_wm", False, False, True),
        ("mixture", False, False, True),
        ("debias_only", True, False, True),
        ("denoise_only", False, True, True),
        ("wmrl", True, True, True),
    ],
)
def test_variant_switches(name: str, debias: bool, denoise: bool, trains_on_wm: bool) -> None:
    v = get_variant(name)
    assert (v.debias, v.denoise, v.trains_on_wm) == (debias, denoise, trains_on_wm)
    assert v.all_anchor == (name == "grpo_real")
    assert v.needs_anchors == (name != "pure_wm")


@pytest.mark.parametrize(
    ("m", "frac", "minimum", "expected"),
    [
        (8, 0.1, 1, 1),
        (8, 0.1, 0, 1),
        (8, 0.05, 0, 0),
        (8, 0.05, 1, 1),
        (8, 0.25, 1, 2),
        (10, 0.3, 1, 3),
        (8, 1.0, 1, 8),
    ],
)
def test_number_of_anchor_groups(m: int, frac: float, minimum: int, expected: int) -> None:
    assert n_anchor_groups(m, frac, minimum) == expected


def test_choose_anchor_groups_is_a_seeded_random_mask() -> None:
    a = choose_anchor_groups(16, 0.25, 1, np.random.default_rng(3))
    b = choose_anchor_groups(16, 0.25, 1, np.random.default_rng(3))
    assert a.dtype == bool and a.sum() == 4 and a.tolist() == b.tolist()


@pytest.mark.parametrize(
    ("m", "frac", "minimum"), [(0, 0.1, 0), (8, 0.0, 1), (8, 1.5, 1), (8, 0.1, 9)]
)
def test_choose_anchor_groups_rejects_bad_arguments(m: int, frac: float, minimum: int) -> None:
    with pytest.raises(ValueError):
        choose_anchor_groups(m, frac, minimum, np.random.default_rng(0))


def test_anchor_mask_per_variant() -> None:
    rng = np.random.default_rng(0)
    assert anchor_mask(get_variant("grpo_real"), 8, 0.1, 1, rng).all()
    assert not anchor_mask(get_variant("pure_wm"), 8, 0.1, 1, rng).any()
    assert anchor_mask(get_variant("wmrl"), 8, 0.25, 1, rng).sum() == 2


def test_group_advantages_subtract_the_group_mean() -> None:
    adv = group_advantages(np.array([[1.0, 0.0, 0.5, 0.5], [0.2, 0.2, 0.2, 0.2]]))
    np.testing.assert_allclose(adv, [[0.5, -0.5, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])


@pytest.mark.parametrize(
    ("scores", "message"),
    [
        (np.zeros((2, 0)), "empty"),
        (np.zeros((3, 1)), "size 1"),
        (np.zeros((0, 4)), "no groups"),
        (np.zeros(4), "2-D"),
        (np.array([[0.1, float("nan")]]), r"scores\[0, 1\].*NaN or outside"),
        (np.array([[0.1, 1.2]]), r"scores\[0, 1\] = 1.2"),
        (np.array([[-0.5, 0.2]]), r"scores\[0, 0\] = -0.5"),
    ],
)
def test_group_advantages_reject_bad_groups(scores: np.ndarray, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        group_advantages(scores)


def test_stream_weights_match_hand_computation() -> None:
    # rho = 2, |G_E| = 1, |G_WM| = 7: denominator 9
    assert stream_weights(2.0, 1, 7) == pytest.approx((2 / 9, 1 / 9))
    assert stream_weights(1.0, 0, 8) == pytest.approx((1 / 8, 1 / 8))


@pytest.mark.parametrize(
    ("rho", "n_e", "n_wm"), [(0.5, 1, 7), (float("nan"), 1, 7), (2.0, 0, 0), (2.0, -1, 3)]
)
def test_stream_weights_reject_bad_arguments(rho: float, n_e: int, n_wm: int) -> None:
    with pytest.raises(ValueError):
        stream_weights(rho, n_e, n_wm)


MASK = np.array([True, False, False, True, False, False, False, False])


@pytest.mark.parametrize(
    ("name", "anchor_w", "wm_w"),
    [
        ("grpo_real", None, None),  # all executed: checked separately
        ("grpo_anchor_only", 1 / 2, 0.0),
        ("mixture", 1 / 8, 1 / 8),
        ("debias_only", 1 / 8, 1 / 8),
        ("denoise_only", 3 / 12, 1 / 12),
        ("wmrl", 3 / 12, 1 / 12),
    ],
)
def test_group_weights_per_variant_with_rho_three(
    name: str, anchor_w: float | None, wm_w: float | None
) -> None:
    if anchor_w is None:
        w = group_weights(get_variant(name), 3.0, np.ones(8, dtype=bool))
        np.testing.assert_allclose(w, np.full(8, 1 / 8))
        return
    w = group_weights(get_variant(name), 3.0, MASK)
    np.testing.assert_allclose(w[MASK], anchor_w)
    np.testing.assert_allclose(w[~MASK], wm_w)


def test_pure_wm_weights_are_equal() -> None:
    np.testing.assert_allclose(
        group_weights(get_variant("pure_wm"), 3.0, np.zeros(8, dtype=bool)), 1 / 8
    )


def test_anchor_only_variant_without_anchors_is_rejected() -> None:
    with pytest.raises(ValueError, match="none was drawn"):
        group_weights(get_variant("grpo_anchor_only"), 1.0, np.zeros(8, dtype=bool))


@settings(max_examples=300, deadline=None)
@given(
    name=st.sampled_from(VARIANTS),
    rho=st.floats(1.0, 1e3, allow_nan=False),
    mask=st.lists(st.booleans(), min_size=1, max_size=64),
)
def test_group_weights_of_a_step_sum_to_one(name: str, rho: float, mask: list[bool]) -> None:
    variant = get_variant(name)
    executed = np.ones(len(mask), dtype=bool) if variant.all_anchor else np.array(mask)
    if not variant.needs_anchors:
        executed[:] = False
    if not variant.trains_on_wm and not executed.any():
        return  # rejected (tested above)
    w = group_weights(variant, rho, executed)
    assert w.sum() == pytest.approx(1.0, rel=1e-12)
    assert np.all(w >= 0)


def test_training_scores_use_truth_on_executed_and_calibration_on_wm_groups() -> None:
    predicted = np.array([[0.2, 0.4], [0.6, 0.8]])
    true = np.array([[float("nan"), float("nan")], [1.0, 0.0]])  # group 0 not executed
    executed = np.array([False, True])
    halve = lambda x: x / 2
    out = training_scores(get_variant("wmrl"), predicted, true, executed, halve)
    np.testing.assert_allclose(out, [[0.1, 0.2], [1.0, 0.0]])
    raw = training_scores(get_variant("mixture"), predicted, true, executed, halve)
    np.testing.assert_allclose(raw, [[0.2, 0.4], [1.0, 0.0]])
