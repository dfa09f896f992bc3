"""The images install what pyproject.toml pins: every requirement a ``pip install`` line of a definition file
names must carry the same version range as pyproject.toml, and the learner image installs the `gpu` extra."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
CONTAINERS = ROOT / "containers"
# Build tools the images install without a pin (not wmrl's dependencies).
BUILD_TOOLS = {"pip", "wheel", "packaging", "ninja", "setuptools"}


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def pyproject_pins() -> dict[str, Requirement]:
    """Every requirement of pyproject.toml (dependencies and the `gpu` extra), by canonical name."""
    p = project()
    reqs = [Requirement(r) for r in [*p["dependencies"], *p["optional-dependencies"]["gpu"]]]
    return {canonicalize_name(r.name): r for r in reqs}


def pip_installs(def_text: str) -> list[str]:
    """The arguments of every ``pip install`` command in a definition file (continuation lines joined)."""
    joined = re.sub(r"\\\n\s*", " ", def_text)
    args: list[str] = []
    for line in joined.splitlines():
        line = line.split(" #", 1)[0].strip()
        if re.search(r"\bpip install\b", line) and not line.startswith("#"):
            words = shlex.split(line.split("pip install", 1)[1])
            args += [w for w in words if not w.startswith("-") and not w.startswith("/opt/sandbox-")]
    return args


def learner_def() -> str:
    return (CONTAINERS / "learner.def").read_text()


def test_learner_image_installs_wmrl_with_the_gpu_extra_not_the_test_extra() -> None:
    targets = [a for a in pip_installs(learner_def()) if a.startswith("/opt/wmrl")]
    assert targets == ["/opt/wmrl[gpu]"]


def test_every_requirement_the_learner_image_names_has_pyprojects_range() -> None:
    pins = pyproject_pins()
    named = [a for a in pip_installs(learner_def()) if not a.startswith("/opt/")]
    assert named, "the learner image installs vLLM (and its torch) before wmrl"
    for arg in named:
        req = Requirement(arg)
        name = canonicalize_name(req.name)
        if name in BUILD_TOOLS and name not in pins:
            continue
        assert name in pins, f"learner.def installs {arg!r}, which pyproject.toml does not name"
        assert req.specifier == pins[name].specifier, \
            f"learner.def installs {arg!r} but pyproject.toml pins {pins[name]}"


def test_the_gpu_extra_has_vllm_and_the_qwen35_kernels_with_upper_bounds() -> None:
    gpu = {canonicalize_name(Requirement(r).name): Requirement(r) for r in project()["optional-dependencies"]["gpu"]}
    assert set(gpu) == {"vllm", "flash-linear-attention", "causal-conv1d"}
    for req in gpu.values():
        assert any(s.operator == "<" for s in req.specifier), f"{req} has no upper bound"


def test_the_learner_image_tests_that_the_kernels_import() -> None:
    test_section = learner_def().split("%test", 1)[1]
    assert "fla.ops.gated_delta_rule" in test_section and "causal_conv1d" in test_section


@pytest.mark.parametrize(("name", "argument"), [("learner.def", "CUDA_VERSION"), ("sandbox.def", "TORCH_CUDA")])
def test_the_cuda_version_is_a_build_argument_with_a_default(name: str, argument: str) -> None:
    text = (CONTAINERS / name).read_text()
    arguments = text.split("%arguments", 1)[1].split("\n%", 1)[0]
    assert re.search(rf"^\s*{argument}=\S+", arguments, re.MULTILINE)
    assert "{{ " + argument + " }}" in text.split("%arguments", 1)[1]


def test_the_sandbox_image_defaults_to_a_cuda_12_torch_for_r535_r550_drivers() -> None:
    text = (CONTAINERS / "sandbox.def").read_text()
    default = re.search(r"^\s*TORCH_CUDA=(cu\d+)", text, re.MULTILINE)
    assert default and default.group(1).startswith("cu12")
    assert "download.pytorch.org/whl/{{ TORCH_CUDA }}" in text
