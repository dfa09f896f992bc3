"""`wmrl plan`'s loss head against a measurement of the same code (wmrl/learner/head.py) on CPU.

scripts/measure_loss_head.py runs the chunked head's forward + backward and reads the peak of resident
memory with every buffer mapped on its own (MALLOC_MMAP_THRESHOLD_), so the peak follows torch's
allocations. Each component's bytes are checked on their own: the bytes per (position, vocabulary entry)
of a chunk as the slope between two chunk sizes, the number of vocabulary-matrix gradients as the slope
between two hidden sizes; then the whole figure, which must not fall below the measured peak (less the
CPU's own work buffers: the BLAS's and the interpreter's, up to ~2 MiB here, whatever the sizes) nor exceed
it by more than ``LOSS_HEAD_MARGIN``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from wmrl.planning.memory import (
    DTYPE_BYTES,
    LOSS_HEAD_BYTES,
    LOSS_HEAD_MARGIN,
    loss_head_bytes,
)

ROOT = Path(__file__).resolve().parents[1]
# PRECISION:VOCAB:CHUNK:HIDDEN:POSITIONS. Chunk-dominated pairs (several chunks each) and a pair where the
# vocabulary matrix's gradients dominate (hidden 1024 vs 2048).
CASES = ["fp32:16384:256:64:1024", "fp32:16384:512:64:1024", "bf16:8192:128:64:512", "bf16:8192:256:64:512",
         "fp32:8192:64:1024:256", "fp32:8192:64:2048:256"]
WORK_BUFFERS = 5 * 2**19  # 2.5 MiB


@pytest.fixture(scope="module")
def measured() -> dict[str, dict]:
    args = [arg for case in CASES for arg in ("--case", case)]
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "measure_loss_head.py"), *args],
                          capture_output=True, text=True, timeout=300, check=False,
                          env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {case: row for case, row in zip(CASES, rows, strict=True)}


@pytest.mark.parametrize(("small", "large"), [(CASES[0], CASES[1]), (CASES[2], CASES[3])])
def test_bytes_per_chunk_element_are_the_measured_ones(measured, small, large):
    a, b = measured[small], measured[large]
    elements = (b["chunk"] - a["chunk"]) * a["vocab"]
    per_element = (b["measured_bytes"] - a["measured_bytes"]) / elements
    assert per_element == pytest.approx(LOSS_HEAD_BYTES[a["precision"]], rel=0.05), (a, b)


def test_the_vocabulary_matrix_gradient_is_counted_three_times_where_it_dominates(measured):
    a, b = measured[CASES[4]], measured[CASES[5]]
    matrix = a["vocab"] * (b["hidden"] - a["hidden"]) * DTYPE_BYTES[a["precision"]]
    matrices = (b["measured_bytes"] - a["measured_bytes"]) / matrix
    assert matrices == pytest.approx(3, rel=0.05), (a, b)


@pytest.mark.parametrize("case", CASES)
def test_the_planned_loss_head_covers_the_measured_peak_within_the_margin(measured, case):
    row = measured[case]
    planned = loss_head_bytes(row["chunk"], row["positions"], row["vocab"], row["hidden"], row["precision"])
    assert planned == row["planned_bytes"]
    assert row["measured_bytes"] - WORK_BUFFERS <= planned <= (1 + LOSS_HEAD_MARGIN) * row["measured_bytes"], row
