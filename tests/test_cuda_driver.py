"""The learner's start-up check that the node's NVIDIA driver runs the CUDA torch was built for
(wmrl/learner/cuda_driver.py): the decision on given versions, and the learner refusing to start on a
node whose (stand-in) nvidia-smi reports a driver too old, before DeepSpeed could fall back to the CPU."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from wmrl.learner.config import LearnerConfig
from wmrl.learner.cuda_driver import (
    CudaDriverError,
    check_cuda_driver,
    cuda_driver_problem,
    driver_cuda_major,
)
from wmrl.learner.engine import build_engines


@pytest.mark.parametrize(("driver", "major"), [
    ("450.80.02", 11), ("525.60.13", 12), ("535.183.01", 12), ("550.54.15", 12), ("570.133.20", 12),
    ("580.65.06", 13), ("580.159.04", 13), ("525.60.12", 11), ("418.87.01", 0),
])
def test_driver_versions_map_to_the_newest_cuda_major_they_run(driver, major):
    assert driver_cuda_major(driver) == major


def test_a_cuda_13_torch_on_an_r550_driver_is_refused_with_the_fix():
    problem = cuda_driver_problem("13.0", None, "550.54.15")
    assert problem is not None
    assert "CUDA 13.0" in problem and "driver 550.54.15 runs CUDA 12.x at most" in problem
    assert ">= 580.65.06" in problem and "R580 or newer driver" in problem and "cuda-compat-13-0" in problem


@pytest.mark.parametrize(("torch_cuda", "driver_api", "driver"), [
    ("13.0", None, "580.65.06"),      # an R580 driver
    ("13.0", 13000, "550.54.15"),     # R550 with the forward-compatibility libraries: the driver API says 13.0
    ("12.8", None, "550.54.15"),      # a CUDA 12 image on R550
    (None, None, "470.82.01"),        # a CPU build of torch
    ("13.0", None, None),             # nothing known about the driver: not refused
])
def test_what_the_driver_runs_passes(torch_cuda, driver_api, driver):
    assert cuda_driver_problem(torch_cuda, driver_api, driver) is None


def test_the_driver_api_version_decides_over_nvidia_smi():
    assert cuda_driver_problem("13.0", 12080, "580.65.06") is not None  # what libcuda says is what loads


def _fake_nvidia_smi(tmp_path: Path, driver: str) -> str:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\necho {driver}\n")
    smi.chmod(0o755)
    return f"{bin_dir}{os.pathsep}{os.environ['PATH']}"


def test_the_learner_refuses_to_start_on_a_driver_too_old_for_its_torch(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", _fake_nvidia_smi(tmp_path, "550.54.15"))
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    with pytest.raises(CudaDriverError, match="R580 or newer"):
        build_engines(LearnerConfig(), tmp_path / "no-model-needed")


def test_nothing_is_checked_on_a_cpu_build_or_without_a_driver(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setenv("PATH", _fake_nvidia_smi(tmp_path, "418.87.01"))
    check_cuda_driver()  # a CPU build: no CUDA to run
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    check_cuda_driver()  # no nvidia-smi: no NVIDIA driver on this node
