"""The synthetic world model expresses what users meet: phi as knots or a safe expression, Student-t
noise, errors shared by a group, a per-task offset; bad settings are config errors naming the key."""

from __future__ import annotations

import json

import numpy as np
import pytest

from wmrl.config import ConfigError, load_config
from wmrl.simulate.expression import Expression, ExpressionError
from wmrl.simulate.world_model import SyntheticWorldModel, apply_phi

R = np.linspace(0.0, 1.0, 11)


def world_model(*overrides: str) -> SyntheticWorldModel:
    return SyntheticWorldModel(load_config(None, list(overrides)).simulator)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.2 + 0.6*r", 0.2 + 0.6 * R),
        ("0.3", np.full(11, 0.3)),
        ("1 - (1 - r)**3", 1 - (1 - R) ** 3),
        ("0.5 + 0.4*sin(2*pi*r)", 0.5 + 0.4 * np.sin(2 * np.pi * R)),
        ("min(r, 0.5) + -r/10", np.minimum(R, 0.5) - R / 10),
    ],
)
def test_expression_evaluates_on_arrays(text: str, expected: np.ndarray) -> None:
    np.testing.assert_allclose(Expression(text)(R), expected, rtol=0, atol=1e-15)


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("__import__('os').system('true')", "call"),
        ("r.__class__", "Attribute"),
        ("open", "name 'open'"),
        ("(lambda: 1)()", "call"),
        ("[r][0]", "Subscript"),
        ("'a' * 3", "literal 'a'"),
        ("r if r else 0", "IfExp"),
        ("sin(r, 2)", "2 argument"),
        ("r < 0.5", "Compare"),
    ],
)
def test_expression_refuses_anything_outside_the_whitelist(text: str, what: str) -> None:
    with pytest.raises(ExpressionError, match=what):
        Expression(text)


def test_huge_power_is_infinite_not_a_hang() -> None:
    with pytest.raises(ExpressionError, match="not finite"):
        Expression("10**10**10 * r").check_finite()


def test_phi_expression_from_the_config_has_an_intercept() -> None:
    wm = world_model("simulator.phi=0.2 + 0.6*r", "simulator.wm_noise=0")
    np.testing.assert_allclose(wm.mean_curve(R, 0), 0.2 + 0.6 * R)


def test_phi_knots_are_piecewise_linear() -> None:
    wm = world_model("simulator.phi=knots", "simulator.phi_knots=[[0,0.2],[0.5,0.3],[1,0.9]]")
    np.testing.assert_allclose(wm.mean_curve(np.array([0.0, 0.25, 0.5, 0.75, 1.0]), 0),
                               [0.2, 0.25, 0.3, 0.6, 0.9])


def test_drift_can_switch_to_an_expression() -> None:
    wm = world_model("simulator.drift_step=10", "simulator.drift_phi=1 - r", "simulator.phi=identity")
    np.testing.assert_allclose(wm.mean_curve(R, 10), 1 - R)
    np.testing.assert_allclose(wm.mean_curve(R, 9), R)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("simulator.phi=os.system(1)", "simulator.phi: 'os.system(1)': the call os.system()"),
        ("simulator.phi=log(r)", "simulator.phi: 'log(r)' is not finite at r = 0"),
        ("simulator.drift_phi=r +", "simulator.drift_phi"),
    ],
)
def test_bad_phi_is_a_config_error_naming_the_key(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_config(None, [override])


@pytest.mark.parametrize(
    "knots",
    [None, "[[0,0.2]]", "[[0,0.2],[0.5,0.3]]", "[[0,0.2],[0.6,0.3],[0.5,0.4],[1,1]]", "[[0,0.2,1],[1,1]]"],
)
def test_bad_knots_are_a_config_error_naming_the_key(knots: str | None) -> None:
    overrides = ["simulator.phi=knots"] + ([] if knots is None else [f"simulator.phi_knots={knots}"])
    with pytest.raises(ConfigError, match=r"simulator\.phi_knots"):
        load_config(None, overrides)


def test_student_t_noise_has_heavy_tails() -> None:
    true = np.full((2000, 8), 0.5)
    draws = {}
    for family in ("gaussian", "student_t"):
        wm = world_model("simulator.phi=identity", "simulator.wm_noise=0.02", f"simulator.wm_noise_family={family}",
                         "simulator.wm_noise_df=2")
        err = wm.predict(true, 0, np.random.default_rng(0)) - 0.5
        draws[family] = np.mean(np.abs(err) > 0.1)  # 5 scales out
    assert draws["gaussian"] < 1e-4 and draws["student_t"] > 0.01


def test_group_offset_is_shared_by_a_group() -> None:
    wm = world_model("simulator.phi=identity", "simulator.wm_noise=0.01", "simulator.wm_group_sd=0.1")
    err = wm.predict(np.full((4000, 8), 0.5), 0, np.random.default_rng(0)) - 0.5
    assert err.mean(axis=1).std() == pytest.approx(0.1, rel=0.05)
    assert (err - err.mean(axis=1, keepdims=True)).std() < 0.012


def test_task_offset_moves_the_first_tasks_only() -> None:
    wm = world_model("simulator.phi=identity", "simulator.wm_noise=0", "simulator.wm_task_offset=-0.2",
                     "simulator.tasks=16")
    r_hat = wm.predict(np.full((16, 8), 0.5), 0, np.random.default_rng(0), tasks=np.arange(16))
    np.testing.assert_allclose(r_hat[:8], 0.3)
    np.testing.assert_allclose(r_hat[8:], 0.5)


def test_task_offset_without_tasks_is_refused() -> None:
    wm = world_model("simulator.wm_task_offset=0.1")
    with pytest.raises(ValueError, match="task of each group"):
        wm.predict(np.full((2, 8), 0.5), 0, np.random.default_rng(0))


def test_default_world_model_draws_as_before() -> None:
    """New keys at their defaults draw nothing extra: earlier runs reproduce bit for bit."""
    wm = world_model()
    true = np.random.default_rng(1).random((8, 8))
    expected = np.clip(true**0.3 + np.random.default_rng(2).normal(0.0, 0.03, (8, 8)), 0, 1)
    np.testing.assert_array_equal(wm.predict(true, 0, np.random.default_rng(2)), expected)


def test_named_phis_still_apply() -> None:
    np.testing.assert_allclose(apply_phi("power", 0.5, R), np.sqrt(R))


def test_simulate_keeps_each_runs_anchor_pool_on_disk(tmp_path) -> None:
    from wmrl.calibration.pool import AnchorPool
    from wmrl.cli.main import main

    out = tmp_path / "sim"
    rc = main(["simulate", "train.steps=40", "tracking.enabled=false", "simulator.phi=0.2 + 0.6*r",
               "--variants", "wmrl", "--seeds", "1", "--workers", "1", "--out", str(out)])
    assert rc == 0
    pool = AnchorPool.load(out / "runs" / "wmrl-seed0")
    runs = json.loads((out / "runs.json").read_text())
    assert len(pool) == runs[0]["history"]["n_pairs"][-1] > 0
    assert (out / "runs" / "wmrl-seed0" / "calibrator.json").exists()
