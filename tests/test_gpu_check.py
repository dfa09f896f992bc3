"""scripts/gpu_check.sh / gpu_check.py, the single-GPU check (issue 34, item 8): its layout is planned
first and fits one 80 GB GPU where the whole 4B on one rank does not; its whole code path runs on the CPU
with a tiny model (--cpu-dry-run); without CUDA it refuses in one line; the probes' output is kept; the
wheels it carries, with what the device image has, meet every requirement of the carried packages."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
from script_support import load_script

ROOT = Path(__file__).resolve().parents[1]
SHELL = ROOT / "scripts" / "gpu_check.sh"
A100_80GB = 80.0
# What the device's Python is (the carried wheels' markers are evaluated for it).
DEVICE_PYTHON = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
                 "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
                 "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}


@pytest.fixture(scope="module")
def gpu_check():
    return load_script("gpu_check")


def _args(config: str, layers: int) -> argparse.Namespace:
    return argparse.Namespace(config=str(ROOT / "configs" / config), overrides=[], cpu_dry_run=False, tokens=24576,
                              layers=layers, dims={})


def test_the_checks_layout_fits_one_80gb_gpu_where_the_whole_4b_on_one_rank_does_not(gpu_check):
    cfg, config, check, own = gpu_check.plans(_args("qwen3.5-4b.yaml", 4), A100_80GB)
    assert check.fits, check.problems
    assert check.learner_ranks == 1 and config.vocab_size == 248_320 and config.hidden_size == 2560
    assert config.layer_types == ["linear_attention"] * 3 + ["full_attention"]
    assert check.tokens == 24576 and cfg.learner.zero_stage == 3 and cfg.generation.backend == "transformers"
    assert own.learner_ranks == 7 and own.fits  # the shipped layout, printed beside the projection
    _, _, whole, _ = gpu_check.plans(_args("qwen3.5-4b.yaml", 32), A100_80GB)  # what gpu_smoke_learner ran
    assert not whole.fits and "learner phase needs" in whole.problems[0]


def test_the_cpu_dry_run_runs_the_whole_path_and_writes_json_and_markdown(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="2")
    env.pop("OUT", None)
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--cpu-dry-run", "--no-probes",
                           "--out", str(tmp_path)], capture_output=True, text=True, env=env, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["zero_stage"] == 3 and result["layers"] == 4 and result["own_ranks"] == 7
    assert result["measured_peak_gb"] > 0 and result["step_seconds"] >= 0 and result["loss"] is not None
    assert result["projected_own_peak_gb"] == pytest.approx(
        result["own_planned_gb"] * result["measured_over_planned"], rel=0.01)
    assert result["loss_head"]["measured_bytes"] > 0 and result["loss_head"]["vocab"] == 512
    assert "linear attention" in result["kernels"]
    text = (tmp_path / "result.md").read_text()
    assert "projected 7-rank peak" in text and "`wmrl plan` qwen3.5-4b.yaml" in text


def test_without_cuda_the_check_refuses_in_one_line(tmp_path):
    import torch

    if torch.cuda.is_available():
        # The refusal is the CPU path; on a GPU machine the check runs instead (scripts/gpu_check.sh).
        pytest.skip("this machine has CUDA")
    env = dict(os.environ, PYTHON=sys.executable, PYTHONPATH=str(ROOT))
    for command in ([sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--out", str(tmp_path)],
                    ["bash", str(SHELL)]):
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120, check=False)
        assert done.returncode == 2 and "no CUDA device" in done.stderr and "--cpu-dry-run" in done.stderr


def test_the_probes_json_and_exit_codes_are_kept_and_a_missing_probe_is_named(gpu_check, tmp_path):
    (tmp_path / "gpu_probe_offload.py").write_text(
        "import json, sys\nprint('log line')\nprint(json.dumps({'ok': False, 'device': sys.argv[2]}, indent=1))\n"
        "sys.exit(1)\n")
    results = gpu_check.run_probes(False, 60, tmp_path)
    offload = results["gpu_probe_offload.py"]
    assert offload["ran"] and offload["rc"] == 1 and offload["result"] == {"ok": False, "device": "auto"}
    assert results["gpu_probe_vl.py"] == {"ran": False, "why": "not in this checkout"}


def _shell_list(name: str) -> dict[str, Version | None]:
    text = SHELL.read_text()
    words = re.search(rf"^{name}=\(([^)]*)\)", text, re.MULTILINE | re.DOTALL)
    assert words, name
    pins: dict[str, Version | None] = {}
    for word in words.group(1).split():
        pkg, _, version = word.partition("==")
        pins[canonicalize_name(pkg)] = Version(version) if version else None
    return pins


def test_the_carried_wheels_and_the_device_image_meet_every_requirement_of_the_carried_packages():
    carried, device = _shell_list("WHEELS"), _shell_list("ON_DEVICE")
    assert {"deepspeed", "transformers", "tokenizers", "safetensors", "omegaconf", "pydantic"} <= set(carried)
    checked = 0
    for name, version in carried.items():
        try:
            if Version(metadata.version(name)) != version:
                continue  # its metadata is not here to read
        except metadata.PackageNotFoundError:
            continue
        checked += 1
        for line in metadata.requires(name) or []:
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate(DEVICE_PYTHON):
                continue
            dep = canonicalize_name(req.name)
            have = carried.get(dep, device.get(dep, "missing"))
            assert have != "missing", f"{name} needs {req}: neither carried nor on the device"
            if have is not None:
                assert req.specifier.contains(have, prereleases=True), f"{name} needs {req}, the check has {have}"
    assert checked >= 8
