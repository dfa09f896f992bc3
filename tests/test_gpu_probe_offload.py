"""scripts/gpu_probe_offload.py, the GPU check of the colocated offload under ZeRO-3, on a CPU: without
CUDA it skips clearly (one JSON line, exit 0), and with ``--device cpu`` it runs its whole round trip
on a tiny model (torch's AdamW there: DeepSpeed moves the partitions it may move; no bytes are freed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = Path(__file__).resolve().parents[1] / "scripts" / "gpu_probe_offload.py"


def run_probe(*args: str) -> tuple[int, dict]:
    proc = subprocess.run([sys.executable, str(PROBE), *args], capture_output=True, text=True, timeout=600,
                          check=False, cwd=PROBE.parent)
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, f"stdout is one JSON line: {proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    return proc.returncode, json.loads(lines[0])


def test_without_cuda_the_probe_skips_and_says_why() -> None:
    rc, report = run_probe()
    assert rc == 0 and "no CUDA device" in report["skipped"]
    rc, report = run_probe("--device", "cuda")
    assert rc == 1 and report["ok"] is False


@pytest.mark.slow
def test_the_probe_runs_its_round_trip_on_the_cpu() -> None:
    rc, report = run_probe("--device", "cpu", "--hidden", "64", "--layers", "2", "--vocab", "512")
    assert rc == 0, report
    assert report["optimizer"] == "AdamW" and report["checks"] == {
        "states_moved": True, "reference_released": True, "round_trip_identical": True,
        "step_after_reload_finite": True}
    assert report["offloaded_states"] == ["contiguous_grad_buffer", "lp_grads", "lp_params"]
    assert report["bytes_mib"]["reference"] > 0 and "allocated_mib" not in report
