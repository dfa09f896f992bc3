"""The anchor-pair pool P = {(r_hat_j, r_j)} (paper §3.3), persistent across restarts.

On disk (when a directory is given) the pool is one append-only log, ``pairs.jsonl``: one JSON record
per :meth:`AnchorPool.add` that added something (``{"step": s, "pairs": [[pair_id, step, task_id,
group_id, traj_id, predicted, true], ...]}``), written and fsynced in one go. A complete line is a
committed record; a crash can only tear the last line, which loading skips and the next append cuts
off. ``durable=False`` skips the fsync (a record then survives a process crash, not a power cut): for
logs nobody resumes from, such as ``wmrl simulate``'s (one fsync per step made a run ~2x slower
here). The atomically replaced snapshot that goes with it is the Calibrator's ``calibrator.json``.

Floats are written by ``json`` (``repr``), which round-trips every double exactly.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from wmrl.io import fsync_dir
from wmrl.scores import check_score

LOG_NAME = "pairs.jsonl"


@dataclass(frozen=True)
class AnchorPair:
    """One anchor trajectory scored twice: by the world model (``predicted``) and by execution (``true``)."""

    pair_id: str  # unique id (e.g. f"{run}/{step}/{group}/{traj}"); duplicates by id are ignored
    step: int
    task_id: str
    group_id: str  # pairs of one GRPO group share it (for the within-group variance of true scores)
    traj_id: str
    predicted: float  # world-model score r_hat in [0, 1]
    true: float  # executed score r in [0, 1]

    def __post_init__(self) -> None:
        for name in ("pair_id", "task_id", "group_id", "traj_id"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"AnchorPair.{name}={value!r} must be a non-empty string")
        if (
            isinstance(self.step, bool)
            or not isinstance(self.step, (int, np.integer))
            or self.step < 0
        ):
            raise ValueError(
                f"AnchorPair.step={self.step!r} must be an integer >= 0 ({self.pair_id})"
            )
        # Normalise to Python floats so that the log and the arrays hold the very same doubles.
        object.__setattr__(
            self, "predicted", check_score(self.predicted, f"AnchorPair.predicted ({self.pair_id})")
        )
        object.__setattr__(
            self, "true", check_score(self.true, f"AnchorPair.true ({self.pair_id})")
        )
        object.__setattr__(self, "step", int(self.step))

    def to_row(self) -> list:
        return [
            self.pair_id,
            self.step,
            self.task_id,
            self.group_id,
            self.traj_id,
            self.predicted,
            self.true,
        ]

    @classmethod
    def from_row(cls, row: list) -> AnchorPair:
        return cls(*row)


class AnchorPool:
    """Pairs in insertion order, with O(1) amortised appends and zero-copy array views."""

    def __init__(self, directory: Path | None = None, *, durable: bool = True) -> None:
        self.directory = None if directory is None else Path(directory)
        self.durable = durable
        self._pairs: list[AnchorPair] = []
        self._ids: set[str] = set()
        # Preallocated columns, grown by doubling, so that arrays() never copies the pool.
        self._pred = np.empty(1024, dtype=np.float64)
        self._true = np.empty(1024, dtype=np.float64)
        self._log_bytes = 0  # length of the log's committed records
        self._log_dirty = False  # the file holds bytes past _log_bytes (torn or ignored records)
        if self.directory is not None:
            if (self.directory / LOG_NAME).exists():
                raise FileExistsError(
                    f"{self.directory} already holds an anchor pool; use load() to resume it"
                )
            self.directory.mkdir(parents=True, exist_ok=True)

    # ------------------------------------------------------------------ queries
    def __len__(self) -> int:
        return len(self._pairs)

    def __contains__(self, pair_id: object) -> bool:
        return pair_id in self._ids

    def arrays(self, last: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(predicted, true) in insertion order, read-only views; ``last``: only the newest that many."""
        n = len(self._pairs)
        start = 0 if last is None else max(0, n - int(last))
        pred, true = self._pred[start:n], self._true[start:n]
        pred.flags.writeable = False
        true.flags.writeable = False
        return pred, true

    def recent(self, window: int) -> list[AnchorPair]:
        """The newest ``window`` pairs, oldest first."""
        if window < 0:
            raise ValueError(f"window={window} must be >= 0")
        return self._pairs[len(self._pairs) - window :] if window else []

    # ------------------------------------------------------------------ updates
    def add(self, pairs: Iterable[AnchorPair], *, step: int | None = None) -> int:
        """Add new pairs (duplicate ids, within the batch or with the pool, are ignored); persist them
        as one log record tagged ``step`` (default: the newest pair step). Returns how many were new."""
        new: list[AnchorPair] = []
        seen: set[str] = set()
        for pair in pairs:
            if not isinstance(pair, AnchorPair):
                raise TypeError(
                    f"AnchorPool.add expects AnchorPair records, got {type(pair).__name__}"
                )
            if pair.pair_id in self._ids or pair.pair_id in seen:
                continue
            seen.add(pair.pair_id)
            new.append(pair)
        if not new:
            return 0
        if self.directory is not None:
            self._persist(new, max(p.step for p in new) if step is None else int(step))
        self._append_memory(new)
        return len(new)

    def _append_memory(self, new: list[AnchorPair]) -> None:
        n, k = len(self._pairs), len(new)
        if n + k > len(self._pred):
            size = max(2 * len(self._pred), n + k)
            for name in ("_pred", "_true"):
                grown = np.empty(size, dtype=np.float64)
                grown[:n] = getattr(self, name)[:n]
                setattr(self, name, grown)
        self._pred[n : n + k] = [p.predicted for p in new]
        self._true[n : n + k] = [p.true for p in new]
        self._pairs.extend(new)
        self._ids.update(p.pair_id for p in new)

    def _persist(self, new: list[AnchorPair], step: int) -> None:
        assert self.directory is not None
        rows = [p.to_row() for p in new]
        record = (json.dumps({"step": step, "pairs": rows}, allow_nan=False) + "\n").encode()
        # Like io.append_line_durable, plus cutting off a torn tail in the same open.
        with open(self.directory / LOG_NAME, "ab") as handle:
            if self._log_dirty:  # drop a torn or ignored tail first: the log stays == the pool
                handle.truncate(self._log_bytes)
                self._log_dirty = False
            handle.write(record)
            handle.flush()
            if self.durable:
                os.fsync(handle.fileno())
        if self._log_bytes == 0 and self.durable:
            fsync_dir(self.directory)  # the log file itself was just created
        self._log_bytes += len(record)

    # ------------------------------------------------------------------ restore
    @classmethod
    def load(cls, directory: Path, *, max_step: int | None = None) -> AnchorPool:
        """Restore a pool from its log; ``max_step``: only the records of steps <= it (later records
        are ignored and cut off at the next append)."""
        directory = Path(directory)
        pool = cls()  # empty, in memory; the directory is attached below
        records = read_log(directory, max_step=max_step)
        for _, batch, _ in records:
            pool.extend_loaded(batch)
        pool.attach(directory, records[-1][2] if records else 0)
        return pool

    def extend_loaded(self, batch: list[AnchorPair]) -> None:
        """Append pairs read back from the log (in memory only; they are already on disk)."""
        self._append_memory(batch)

    def attach(self, directory: Path, log_bytes: int) -> None:
        """Continue the log in ``directory`` whose first ``log_bytes`` bytes hold this pool."""
        self.directory = Path(directory)
        self._log_bytes = log_bytes
        log = self.directory / LOG_NAME
        self._log_dirty = (log.stat().st_size if log.exists() else 0) != log_bytes


def read_log(
    directory: Path, *, max_step: int | None = None
) -> list[tuple[int, list[AnchorPair], int]]:
    """The committed records of a pool log as (step, pairs, end offset in bytes), in order.

    A torn or unparseable last line is skipped (a crash while appending); a bad line before the end
    is corruption and raises, naming the file and line.
    """
    log = Path(directory) / LOG_NAME
    if not log.exists():
        raise FileNotFoundError(f"no anchor pool in {directory} (expected {LOG_NAME})")
    data = log.read_bytes()
    records: list[tuple[int, list[AnchorPair], int]] = []
    offset, line_no = 0, 0
    while offset < len(data):
        end = data.find(b"\n", offset)
        line_no += 1
        if end < 0:
            break  # torn last line: the crash happened while writing it
        try:
            record = json.loads(data[offset:end])
            step, batch = int(record["step"]), [AnchorPair.from_row(r) for r in record["pairs"]]
        except (ValueError, KeyError, TypeError) as err:
            if end + 1 == len(data):
                break  # unparseable last line: torn as well
            raise ValueError(f"{log}:{line_no}: corrupt anchor-pool record: {err}") from err
        if max_step is not None and step > max_step:
            break
        records.append((step, batch, end + 1))
        offset = end + 1
    return records
