"""The run directory: layout, manifest, config snapshot, end-of-run marker, launch timings."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from wmrl.config import ConfigError, load_config, to_yaml
from wmrl.io import read_json
from wmrl.storage.rundir import LAYOUT, RunDir, config_mismatch, create_run_dir


def test_new_run_directory_has_the_layout_config_and_manifest(tmp_path: Path) -> None:
    cfg = load_config(None, ["run_name=r1"])
    run = create_run_dir(tmp_path / "r1", to_yaml(cfg))
    assert all((run.path / name).is_dir() for name in LAYOUT)
    assert load_config(run.config_path).run_name == "r1"
    manifest = read_json(run.manifest_path)
    assert manifest["run_id"] == "r1" and manifest["host"] == socket.gethostname()
    assert manifest["versions"]["numpy"] and manifest["versions"]["python"]
    assert set(manifest["git"]) == {"commit", "dirty"}


def test_reopening_a_run_records_another_start(tmp_path: Path) -> None:
    text = to_yaml(load_config(None, ["run_name=r1"]))
    create_run_dir(tmp_path / "r1", text)
    run = create_run_dir(tmp_path / "r1", text)
    assert len(read_json(run.manifest_path)["starts"]) == 2


def test_reopening_a_run_with_another_config_is_refused(tmp_path: Path) -> None:
    create_run_dir(tmp_path / "r1", to_yaml(load_config(None, ["run_name=r1"])))
    with pytest.raises(ValueError, match=r"different config \(algorithm.w_max: 4.0 in the run, 2.0 now\)"):
        create_run_dir(tmp_path / "r1", to_yaml(load_config(None, ["run_name=r1", "algorithm.w_max=2"])))


def test_opening_a_directory_without_config_names_it(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not a wmrl run directory"):
        RunDir.open(tmp_path)


def test_ended_marker_keeps_the_first_reason(tmp_path: Path) -> None:
    run = create_run_dir(tmp_path / "r1", to_yaml(load_config(None, ["run_name=r1"])))
    assert not run.is_ended()
    run.mark_ended("finished")
    run.mark_ended("cancelled")
    assert run.is_ended() and run.ended_reason() == "finished"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (["launch.timing.heartbeat_s=70"],
         "launch.timing.heartbeat_s=70.0 must be at most half of launch.timing.lease_s"),
        (["launch.timing.lock_heartbeat_s=100"], "launch.timing.lock_heartbeat_s"),
        (["launch.timing.poll_min_s=2"], "launch.timing.poll_min_s=2.0 exceeds launch.timing.poll_max_s"),
        (["launch.timing.lease_s=0"], "launch.timing.lease_s=0.0 is out of range"),
        (["launch.max_attempts=0"], "launch.max_attempts=0 is out of range"),
    ],
)
def test_bad_launch_timings_are_rejected_naming_the_key(override: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        load_config(None, override)


def test_config_mismatch_names_every_key_that_differs(tmp_path: Path) -> None:
    run = create_run_dir(tmp_path / "r1", to_yaml(load_config(None, ["run_name=r1", "tracking.uri=sqlite:////x.db"])))
    why = config_mismatch(run, to_yaml(load_config(None, ["run_name=r1", "algorithm.seed=3"])))
    assert "algorithm.seed: 0 in the run, 3 now" in why
    assert "tracking.uri: 'sqlite:////x.db' in the run, 'sqlite:///mlflow.db' now" in why
    assert "w_max" not in why


def test_reopen_moves_the_ended_marker_to_the_logs(tmp_path: Path) -> None:
    run = create_run_dir(tmp_path / "r1", to_yaml(load_config(None, ["run_name=r1"])))
    run.mark_ended("cancelled by user")
    run.reopen()
    assert not run.is_ended()
    (history,) = run.logs.glob("ended-*.json")
    assert read_json(history)["reason"] == "cancelled by user"


def test_a_run_made_before_the_launch_timings_moved_still_relaunches(tmp_path: Path) -> None:
    """Its stored config has ``launch.lease_s`` where this version writes ``launch.timing.lease_s``."""
    import warnings

    import yaml

    from wmrl.config import as_written_now

    now = to_yaml(load_config(None, ["run_name=r1"]))
    old = yaml.safe_load(now)
    old["launch"].update(old["launch"].pop("timing"))  # the layout of rounds <= 14
    run = create_run_dir(tmp_path / "r1", yaml.safe_dump(old, sort_keys=False))
    assert config_mismatch(run, now) is not None  # the stored text differs...
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert config_mismatch(run, now, as_written_now) is None  # ...but it is the same config
        create_run_dir(tmp_path / "r1", now, normalise=as_written_now)
    assert any("launch.timing.lease_s" in str(w.message) for w in seen)
    changed = to_yaml(load_config(None, ["run_name=r1", "algorithm.w_max=3.0"]))
    assert "algorithm.w_max: 4.0 in the run, 3.0 now" in config_mismatch(run, changed, as_written_now)
