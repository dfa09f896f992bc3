"""Config loading: defaults <- YAML <- key=value, and every bad input named at load time."""

from __future__ import annotations

import importlib
import warnings
from pathlib import Path

import pytest

from wmrl.config import ConfigError, WMRLConfig, load_config, to_flat_dict, to_yaml


def test_defaults_are_the_paper_constants() -> None:
    cfg = load_config()
    alg = cfg.algorithm
    assert (alg.variant, alg.groups_per_step, alg.group_size) == ("wmrl", 8, 8)
    assert (alg.min_pairs, alg.refit_every, alg.w_max, alg.min_anchor_groups) == (200, 64, 4.0, 1)


def test_yaml_then_overrides_win_in_order(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("run_name: sweep-1\nalgorithm:\n  anchor_frac: 0.25\n  w_max: 2.0\n")
    cfg = load_config(path, ["algorithm.w_max=3.5", "algorithm.variant=mixture"])
    assert isinstance(cfg, WMRLConfig)
    assert cfg.run_name == "sweep-1"
    assert cfg.algorithm.anchor_frac == 0.25
    assert cfg.algorithm.w_max == 3.5
    assert cfg.algorithm.variant == "mixture"
    assert cfg.run_dir == Path("runs/sweep-1")


def test_dumped_yaml_loads_back_identically(tmp_path: Path) -> None:
    cfg = load_config(None, ["algorithm.anchor_frac=0.3", "run_name=r"])
    path = tmp_path / "dump.yaml"
    path.write_text(to_yaml(cfg))
    assert to_flat_dict(load_config(path)) == to_flat_dict(cfg)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("algorithm.anchor_fraction=0.1", r"unknown config key 'algorithm.anchor_fraction'.*anchor_frac"),
        ("algorithms.w_max=2", r"unknown config key 'algorithms'.*algorithm"),
        ("algorithm.min_pairs=many", r"'algorithm.min_pairs' has the wrong type \(expected int\)"),
        ("algorithm.anchor_frac=0", r"algorithm.anchor_frac=0.0 is out of range; allowed: \(0.0, 1.0\]"),
        ("algorithm.anchor_frac=1.5", r"algorithm.anchor_frac=1.5 is out of range"),
        ("algorithm.anchor_frac=nan", r"algorithm.anchor_frac=nan is out of range"),
        ("algorithm.w_max=0.5", r"algorithm.w_max=0.5 is out of range; allowed: \[1.0, inf\)"),
        ("algorithm.group_size=-1", r"algorithm.group_size=-1 is out of range"),
        ("algorithm.groups_per_step=0", r"algorithm.groups_per_step=0 is out of range"),
        ("algorithm.min_pairs=-5", r"algorithm.min_pairs=-5 is out of range"),
        ("algorithm.variant=ppo", r"algorithm.variant='ppo' is not allowed; choose one of: grpo_real, .*wmrl"),
        ("algorithm.min_anchor_groups=9", r"min_anchor_groups=9 exceeds algorithm.groups_per_step=8"),
        ("algorithm.min_anchor_groups=0", (r"algorithm.min_anchor_groups=0 is not allowed with "
                                           r"algorithm.variant='wmrl'.*allowed: >= 1")),
        ("trainer=ppo", r"trainer='ppo' is not allowed; choose one of: anchored_sim, dry"),
    ],
)
def test_bad_values_name_the_key_and_what_is_allowed(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(None, [override])


@pytest.mark.parametrize("variant", ["grpo_real", "pure_wm"])
def test_variants_that_draw_no_anchor_groups_accept_min_anchor_groups_zero(variant: str) -> None:
    cfg = load_config(None, [f"algorithm.variant={variant}", "algorithm.min_anchor_groups=0"])
    assert cfg.algorithm.min_anchor_groups == 0


def test_override_without_equals_is_rejected() -> None:
    with pytest.raises(ConfigError, match="key=value"):
        load_config(None, ["algorithm.w_max"])


def test_missing_and_malformed_files_are_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found: .*nope.yaml"):
        load_config(tmp_path / "nope.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("algorithm: [unclosed\n")
    with pytest.raises(ConfigError, match="broken.yaml: not valid YAML"):
        load_config(broken)


def test_unknown_key_in_yaml_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "typo.yaml"
    path.write_text("algorithm:\n  wmax: 2\n")
    with pytest.raises(ConfigError, match="algorithm.wmax"):
        load_config(path)


def test_cli_reports_config_errors_with_exit_code_2(capsys: pytest.CaptureFixture[str]) -> None:
    from wmrl.cli.main import main

    assert main(["simulate", "algorithm.w_max=0"]) == 2
    assert "algorithm.w_max=0.0 is out of range" in capsys.readouterr().err


def test_one_run_length_for_every_trainer_and_the_old_key_still_loads(tmp_path: Path) -> None:
    # train.steps is the run's length for the testbed as for the LLM trainer
    assert load_config(None, ["trainer=anchored_sim", "train.steps=7"]).train.steps == 7
    assert not hasattr(load_config().simulator, "steps")
    # an override or file of rounds 1-8 (simulator.steps) is moved, with a warning naming the new key
    with pytest.warns(FutureWarning, match="simulator.steps is train.steps now"):
        assert load_config(None, ["simulator.steps=9"]).train.steps == 9
    # a saved config of that time carried both keys: its trainer's own one was the run's length
    old = "trainer: {t}\nsimulator:\n  steps: 300\ntrain:\n  steps: 12\n"
    (tmp_path / "sim.yaml").write_text(old.format(t="anchored_sim"))
    with pytest.warns(FutureWarning):
        assert load_config(tmp_path / "sim.yaml").train.steps == 300
    (tmp_path / "llm.yaml").write_text(old.format(t="llm"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to say: the testbed's value never meant anything there
        assert load_config(tmp_path / "llm.yaml").train.steps == 12
    # the schedule of the testbed's world model must fall inside the run
    with pytest.raises(ConfigError, match=r"simulator.drift_step"):
        load_config(None, ["train.steps=50", "simulator.drift_step=60"])


def test_launch_timings_are_one_section_and_their_old_keys_still_load(tmp_path: Path) -> None:
    timing = load_config(None, ["launch.timing.lease_s=30", "launch.timing.coordinator_time_min=20"]).launch.timing
    assert (timing.lease_s, timing.coordinator_time_min, timing.heartbeat_s) == (30.0, 20, 10.0)
    assert not hasattr(load_config().launch, "lease_s")
    # an override, a config file or a saved run's config.yaml of before (flat launch keys) moves them
    with pytest.warns(FutureWarning, match=r"launch.lease_s is launch.timing.lease_s now.*lease_s=30"):
        assert load_config(None, ["launch.lease_s=30"]).launch.timing.lease_s == 30.0
    old = tmp_path / "old.yaml"
    old.write_text("launch:\n  executor: local\n  heartbeat_s: 5\n  idle_timeout_s: 90\n  signal_delay_s: 60\n")
    with pytest.warns(FutureWarning) as said:
        timing = load_config(old).launch.timing
    assert (timing.heartbeat_s, timing.idle_timeout_s, timing.signal_delay_s) == (5.0, 90.0, 60)
    assert len(said) == 1  # one warning per file, naming every key it moved
    assert all(f"launch.{k} is launch.timing.{k} now" in str(said[0].message)
               for k in ("heartbeat_s", "idle_timeout_s", "signal_delay_s"))
    assert "launch.lease_s" not in str(said[0].message)
    # a moved key's value is still checked, under its new name
    with (pytest.raises(ConfigError, match=r"launch.timing.poll_min_s=2.0 exceeds launch.timing.poll_max_s"),
          pytest.warns(FutureWarning)):
        load_config(None, ["launch.poll_min_s=2"])
    # new files load without a word
    new = tmp_path / "new.yaml"
    new.write_text("launch:\n  timing:\n    heartbeat_s: 5\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_config(new).launch.timing.heartbeat_s == 5.0


def test_a_work_function_of_the_old_orchestration_package_still_loads(tmp_path: Path) -> None:
    """A run directory made before the run wing's rooms (issue 33) names its workers' work function by its
    old path; it loads as the function's new home, with one FutureWarning, and runs there."""
    old = tmp_path / "config.yaml"
    old.write_text("launch:\n  work: wmrl.orchestration.work:real_work\n")
    with pytest.warns(FutureWarning, match=r"launch.work=wmrl.orchestration.work:real_work is "
                                           r"wmrl.orchestration.anchors:real_work now"):
        assert load_config(old).launch.work == "wmrl.orchestration.anchors:real_work"
    with pytest.warns(FutureWarning, match=r"wmrl.execution.work:python_work"):
        moved = load_config(None, ["launch.work=wmrl.orchestration.work:python_work"]).launch.work
    module, _, name = moved.partition(":")
    assert callable(getattr(importlib.import_module(module), name))
    assert load_config().launch.work == "wmrl.orchestration.anchors:real_work"


@pytest.mark.parametrize("path", sorted([*(Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"),
                                         *(Path(__file__).resolve().parents[1] / "wmrl" / "configs").glob("*.yaml")]),
                         ids=lambda p: p.name)
def test_every_shipped_config_loads_without_a_moved_key(path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # a shipped file uses the keys of today
        assert isinstance(load_config(path), WMRLConfig)
