"""Anchor pool: validation, duplicates, recent windows, append-only log + committed state."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from wmrl.calibration.pool import LOG_NAME, AnchorPair, AnchorPool


def pair(
    i: int, predicted: float = 0.5, true: float = 0.25, group: str | None = None
) -> AnchorPair:
    return AnchorPair(
        f"run/{i}", i // 8, "task", group or f"g{i // 8}", f"t{i % 8}", predicted, true
    )


def random_pairs(n: int, seed: int = 0, start: int = 0) -> list[AnchorPair]:
    rng = np.random.default_rng(seed)
    return [pair(start + i, float(rng.random()), float(rng.random())) for i in range(n)]


@pytest.mark.parametrize("field", ["predicted", "true"])
@pytest.mark.parametrize("value", [-0.01, 1.0000001, float("nan"), float("inf"), "high"])
def test_pair_rejects_score_outside_unit_interval(field: str, value: object) -> None:
    kwargs = {"predicted": 0.5, "true": 0.5, field: value}
    with pytest.raises(ValueError, match=rf"AnchorPair\.{field}.*\[0, 1\]"):
        AnchorPair("id", 0, "task", "g", "t", **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("field", ["pair_id", "task_id", "group_id", "traj_id"])
def test_pair_rejects_empty_ids(field: str) -> None:
    kwargs = {"pair_id": "p", "step": 0, "task_id": "t", "group_id": "g", "traj_id": "x", field: ""}
    with pytest.raises(ValueError, match=field):
        AnchorPair(predicted=0.1, true=0.2, **kwargs)  # type: ignore[arg-type]


def test_pair_rejects_negative_step() -> None:
    with pytest.raises(ValueError, match="step"):
        AnchorPair("p", -1, "t", "g", "x", 0.1, 0.2)


def test_add_returns_number_of_new_pairs_and_ignores_duplicate_ids() -> None:
    pool = AnchorPool()
    assert pool.add([pair(0), pair(1)]) == 2
    assert pool.add([pair(1, 0.9, 0.9), pair(2), pair(2, 0.1, 0.1)]) == 1
    assert len(pool) == 3
    pred, _ = pool.arrays()
    assert pred.tolist() == [0.5, 0.5, 0.5]  # the duplicate's different values were not taken


def test_add_rejects_non_pairs() -> None:
    with pytest.raises(TypeError, match="AnchorPair"):
        AnchorPool().add([(0.1, 0.2)])  # type: ignore[list-item]


def test_arrays_keep_insertion_order_and_last_selects_newest() -> None:
    pool = AnchorPool()
    pairs = random_pairs(3000)  # crosses the preallocated capacity
    pool.add(pairs[:1000])
    pool.add(pairs[1000:])
    pred, true = pool.arrays()
    assert pred.tolist() == [p.predicted for p in pairs]
    assert true.tolist() == [p.true for p in pairs]
    last_pred, _ = pool.arrays(last=5)
    assert last_pred.tolist() == [p.predicted for p in pairs[-5:]]


def test_arrays_are_read_only_views() -> None:
    pool = AnchorPool()
    pool.add(random_pairs(4))
    pred, _ = pool.arrays()
    with pytest.raises(ValueError):
        pred[0] = 1.0


def test_recent_returns_newest_pairs_oldest_first() -> None:
    pool = AnchorPool()
    pairs = random_pairs(10)
    pool.add(pairs)
    assert pool.recent(3) == pairs[-3:]
    assert pool.recent(0) == []
    assert pool.recent(50) == pairs


def test_persisted_pool_reloads_bit_identical(tmp_path: Path) -> None:
    pool = AnchorPool(tmp_path)
    pairs = random_pairs(500)
    pairs.append(pair(500, math.nextafter(0.0, 1.0), math.nextafter(1.0, 0.0)))  # extreme doubles
    for s in range(0, len(pairs), 37):
        pool.add(pairs[s : s + 37])
    loaded = AnchorPool.load(tmp_path)
    assert loaded.recent(len(loaded)) == pairs
    for a, b in zip(pool.arrays(), loaded.arrays()):
        assert a.tobytes() == b.tobytes()


def test_reloaded_pool_still_ignores_known_ids(tmp_path: Path) -> None:
    AnchorPool(tmp_path).add(random_pairs(5))
    loaded = AnchorPool.load(tmp_path)
    assert loaded.add(random_pairs(5)) == 0
    assert loaded.add(random_pairs(2, start=5)) == 2
    assert len(AnchorPool.load(tmp_path)) == 7


def test_torn_last_log_line_is_skipped(tmp_path: Path) -> None:
    AnchorPool(tmp_path).add(random_pairs(10))
    with open(tmp_path / LOG_NAME, "ab") as handle:
        handle.write(
            b'{"step": 1, "pairs": [["run/99", 1, "task", "g", "t", 0.5'
        )  # crash mid-write
    assert len(AnchorPool.load(tmp_path)) == 10


def test_unparseable_last_line_is_treated_as_torn(tmp_path: Path) -> None:
    AnchorPool(tmp_path).add(random_pairs(10))
    with open(tmp_path / LOG_NAME, "ab") as handle:
        handle.write(b'{"step": 1, "pai\n')
    assert len(AnchorPool.load(tmp_path)) == 10


def test_append_after_torn_line_cuts_it_off(tmp_path: Path) -> None:
    AnchorPool(tmp_path).add(random_pairs(10))
    with open(tmp_path / LOG_NAME, "ab") as handle:
        handle.write(b'{"step": 1, "pairs": [["run/99", 1')
    loaded = AnchorPool.load(tmp_path)
    loaded.add(random_pairs(3, start=10))
    lines = (tmp_path / LOG_NAME).read_text().splitlines()
    assert [len(json.loads(line)["pairs"]) for line in lines] == [10, 3]
    assert len(AnchorPool.load(tmp_path)) == 13


def test_load_up_to_a_step_ignores_later_records(tmp_path: Path) -> None:
    pool = AnchorPool(tmp_path)
    pool.add(random_pairs(10), step=0)
    pool.add(random_pairs(4, start=10), step=1)
    pool.add(random_pairs(4, start=14), step=2)
    loaded = AnchorPool.load(tmp_path, max_step=1)
    assert len(loaded) == 14
    loaded.add(random_pairs(1, start=50), step=2)  # the ignored step-2 record is cut off first
    assert len(AnchorPool.load(tmp_path)) == 15


def test_record_step_defaults_to_newest_pair_step(tmp_path: Path) -> None:
    AnchorPool(tmp_path).add([pair(3), pair(20)])  # steps 0 and 2
    assert json.loads((tmp_path / LOG_NAME).read_text())["step"] == 2


def test_corrupt_record_inside_log_names_file_and_line(tmp_path: Path) -> None:
    pool = AnchorPool(tmp_path)
    pool.add(random_pairs(3))
    pool.add(random_pairs(3, start=3))
    log = tmp_path / LOG_NAME
    lines = log.read_text().splitlines(keepends=True)
    log.write_text("garbage\n" + lines[1])
    with pytest.raises(ValueError, match=rf"{LOG_NAME}:1: corrupt"):
        AnchorPool.load(tmp_path)


def test_load_of_missing_pool_says_where(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no anchor pool"):
        AnchorPool.load(tmp_path)


def test_new_pool_refuses_directory_holding_one(tmp_path: Path) -> None:
    AnchorPool(tmp_path).add(random_pairs(1))
    with pytest.raises(FileExistsError, match="load"):
        AnchorPool(tmp_path)


@pytest.mark.parametrize("durable", [True, False])
def test_pool_log_is_fsynced_only_when_durable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               durable: bool) -> None:
    import wmrl.calibration.pool as pool_module

    synced: list[int] = []
    monkeypatch.setattr(pool_module.os, "fsync", lambda fd: synced.append(fd))
    pool = AnchorPool(tmp_path, durable=durable)
    for step in range(3):
        pool.add(random_pairs(8, seed=step, start=8 * step))
    assert bool(synced) == durable
    reloaded = AnchorPool.load(tmp_path)  # the same complete log either way
    assert [p.to_row() for p in reloaded.recent(24)] == [p.to_row() for p in pool.recent(24)]
