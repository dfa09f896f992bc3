"""Submission validation: turn an untrusted file into an id-aligned prediction matrix, or a reason.

Everything here treats the submission as hostile: it may be a symlink, huge, binary, in a strange
encoding, have duplicated or missing ids, strings where numbers belong, NaN or inf. Every problem
becomes ``Validation(valid=False, reason=...)``; nothing raises.
"""

from __future__ import annotations

import io
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from wmrl.grading.metrics import Metric

DEFAULT_MAX_BYTES = 64 << 20  # far above any honest submission of the built-in pool


@dataclass
class Validation:
    valid: bool
    reason: str = ""
    y_pred: np.ndarray | None = None  # [n_rows, n_targets] in the order of the answers' ids


def normalise_labels(values: pd.Series) -> np.ndarray:
    """Labels as comparable strings: ``3``, ``3.0`` and ``"3"`` all become ``"3"``."""
    text = values.astype(str).str.strip()
    numbers = pd.to_numeric(text, errors="coerce")
    integral = numbers.notna() & np.isfinite(numbers) & (numbers == np.round(numbers))
    out = text.copy()
    out[integral] = numbers[integral].astype("int64").astype(str)
    return out.to_numpy(dtype=object)


def _invalid(reason: str) -> Validation:
    return Validation(False, reason)


def read_submission_text(path: Path, max_bytes: int) -> tuple[str | None, str]:
    """The file's text, or ``(None, reason)``. Refuses symlinks, non-files, oversize and binary data."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None, "no submission file was written at SUBMISSION_PATH"
    except OSError as err:
        return None, f"submission file cannot be inspected: {err.strerror}"
    if stat.S_ISLNK(info.st_mode):
        return None, "submission is a symbolic link; write a regular CSV file"
    if not stat.S_ISREG(info.st_mode):
        return None, "submission is not a regular file"
    if info.st_size > max_bytes:
        return None, f"submission is {info.st_size} bytes, over the {max_bytes}-byte limit"
    if info.st_size == 0:
        return None, "submission file is empty"
    try:
        # O_NOFOLLOW: the file could have been swapped for a link after the lstat above.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as handle:
            data = handle.read(max_bytes + 1)
    except OSError as err:
        return None, f"submission file cannot be read: {err.strerror}"
    if len(data) > max_bytes:
        return None, f"submission is over the {max_bytes}-byte limit"
    if b"\x00" in data:
        return None, "submission contains NUL bytes; it must be a UTF-8 text CSV"
    try:
        return data.decode("utf-8-sig"), ""
    except UnicodeDecodeError as err:
        return None, f"submission is not valid UTF-8 (byte {err.start}); write it as UTF-8 CSV"


def validate_submission(
    path: Path,
    answers: pd.DataFrame,
    id_column: str,
    target_columns: tuple[str, ...],
    metric: Metric,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> Validation:
    text, reason = read_submission_text(Path(path), max_bytes)
    if text is None:
        return _invalid(reason)
    try:
        frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=True)
    except Exception as err:  # noqa: BLE001 - ParserError, EmptyDataError, csv.Error, MemoryError on absurd rows, ...
        return _invalid(f"submission could not be parsed as CSV: {str(err).splitlines()[0][:200]}")
    required = [id_column, *target_columns]
    missing = [c for c in required if c not in frame.columns]
    if missing:
        return _invalid(f"submission is missing column(s) {missing}; required columns: {required}")
    extra = [str(c) for c in frame.columns if c not in required]
    if extra:
        return _invalid(f"submission has unexpected column(s) {extra[:10]}; required columns: {required}")
    if len(frame) != len(answers):
        return _invalid(f"submission has {len(frame)} rows; expected {len(answers)} (one per test id)")
    if frame[id_column].isna().any():
        return _invalid(f"column '{id_column}' has missing ids")
    ids = normalise_labels(frame[id_column])
    if len(set(ids)) != len(ids):
        dup = pd.Series(ids).value_counts()
        return _invalid(f"column '{id_column}' has duplicated ids, e.g. {dup[dup > 1].index[0]!r}")
    expected = normalise_labels(answers[id_column])
    unknown = sorted(set(ids) - set(expected))
    if unknown:
        return _invalid(f"{len(unknown)} id(s) are not in the test set, e.g. {unknown[0]!r}")
    index = {key: row for row, key in enumerate(ids)}
    order = np.fromiter((index[key] for key in expected), dtype=np.int64, count=len(expected))
    columns = []
    for column in target_columns:
        values = frame[column].iloc[order].reset_index(drop=True)
        if values.isna().any():
            return _invalid(f"column '{column}' has {int(values.isna().sum())} missing value(s)")
        if metric.kind == "label":
            columns.append(normalise_labels(values))
            continue
        numbers = pd.to_numeric(values.str.strip(), errors="coerce")
        if numbers.isna().any():
            bad = values[numbers.isna()].iloc[0]
            return _invalid(f"column '{column}' must be numeric; found {str(bad)[:40]!r}")
        if not np.isfinite(numbers.to_numpy(float)).all():
            return _invalid(f"column '{column}' has infinite values")
        columns.append(numbers.to_numpy(float))
    dtype = object if metric.kind == "label" else float
    return Validation(True, "", np.column_stack(columns).astype(dtype))


def answers_matrix(answers: pd.DataFrame, target_columns: tuple[str, ...], metric: Metric) -> np.ndarray:
    if metric.kind == "label":
        return np.column_stack([normalise_labels(answers[c]) for c in target_columns]).astype(object)
    return answers[list(target_columns)].to_numpy(float)


def check_probability_rows(y_pred: np.ndarray, atol: float) -> str:
    """MLE-bench's rule for probability submissions: every value in [0, 1], every row sums to one
    within ``atol``. Returns the reason a submission breaks it, or ``""``."""
    values = np.asarray(y_pred, dtype=float)
    if ((values < 0) | (values > 1)).any():
        return "all probabilities must lie between 0 and 1"
    if values.shape[1] > 1 and not np.isclose(values.sum(axis=1), 1.0, atol=atol).all():
        row = int(np.argmax(~np.isclose(values.sum(axis=1), 1.0, atol=atol)))
        return f"each row's probabilities must sum to one (within {atol:g}); row {row + 1} sums to {values[row].sum():.6g}"
    return ""
