"""The images install what pyproject.toml pins: every requirement a ``pip install`` line of a definition file
names must carry the same version range as pyproject.toml, and the learner image installs the `gpu` extra."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
CONTAINERS = ROOT / "containers"
# Build tools the images install without a pin (not wmrl's dependencies).
BUILD_TOOLS = {"pip", "wheel", "packaging", "ninja", "setuptools"}
CONSTRAINT_OPTIONS = {"-c", "--constraint"}
GPU_LOCK = ROOT / "constraints-gpu.txt"


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def pyproject_pins() -> dict[str, Requirement]:
    """Every requirement of pyproject.toml (dependencies and the `gpu` extra), by canonical name."""
    p = project()
    reqs = [Requirement(r) for r in [*p["dependencies"], *p["optional-dependencies"]["gpu"]]]
    return {canonicalize_name(r.name): r for r in reqs}


def pip_commands(def_text: str) -> list[tuple[list[str], list[str]]]:
    """Each ``pip install`` command of a definition file (continuation lines joined): its arguments and
    its constraint files (``-c FILE``)."""
    joined = re.sub(r"\\\n\s*", " ", def_text)
    commands = []
    for line in joined.splitlines():
        line = line.split(" #", 1)[0].strip()
        if re.search(r"\bpip install\b", line) and not line.startswith("#"):
            words = shlex.split(line.split("pip install", 1)[1])
            constraints = [words[i + 1] for i, w in enumerate(words[:-1]) if w in CONSTRAINT_OPTIONS]
            words = [w for i, w in enumerate(words) if i == 0 or words[i - 1] not in CONSTRAINT_OPTIONS]
            commands.append(([w for w in words if not w.startswith("-") and not w.startswith("/opt/sandbox-")],
                             constraints))
    return commands


def pip_installs(def_text: str) -> list[str]:
    """The arguments of every ``pip install`` command in a definition file."""
    return [arg for args, _ in pip_commands(def_text) for arg in args]


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


# --------------------------------------------------------------------------- the gpu lock (issue 34, item 3)


def gpu_lock() -> dict[str, Version]:
    pins = {}
    for line in GPU_LOCK.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", f"constraints-gpu.txt: {line!r} is not an exact pin"
            pins[canonicalize_name(req.name)] = Version(spec.version)
    return pins


def locked_torch_cuda() -> str:
    """major.minor of the CUDA the locked torch is built for: its cuda-toolkit pin (torch 2.14's wheel
    requires cuda-toolkit[...]==13.0.3 on Linux)."""
    toolkit = gpu_lock()["cuda-toolkit"]
    return f"{toolkit.major}.{toolkit.minor}"


def learner_cuda_default() -> str:
    arguments = learner_def().split("%arguments", 1)[1].split("\n%", 1)[0]
    match = re.search(r"^\s*CUDA_VERSION=(\S+)", arguments, re.MULTILINE)
    assert match
    return match.group(1)


def test_the_gpu_lock_pins_every_requirement_of_wmrl_with_the_gpu_extra_inside_its_range() -> None:
    pins = gpu_lock()
    for name, req in pyproject_pins().items():
        if req.marker is not None and not req.marker.evaluate({"sys_platform": "linux", "platform_machine": "x86_64"}):
            continue
        assert name in pins, f"constraints-gpu.txt does not pin {name} ({req})"
        assert req.specifier.contains(pins[name], prereleases=True), f"the lock's {name}=={pins[name]} is outside {req}"
    assert "torch" in pins and "wmrl" not in pins


def test_the_learner_images_default_cuda_is_the_cuda_of_the_locked_torch() -> None:
    default = Version(learner_cuda_default())
    assert f"{default.major}.{default.minor}" == locked_torch_cuda(), \
        f"learner.def builds with CUDA_VERSION={default}, vLLM's torch is a CUDA {locked_torch_cuda()} build"


def test_the_learner_images_own_cuda_check_passes_for_its_default(tmp_path) -> None:
    """%post's check, run as the build would (template argument substituted) against a torch module that
    reports the locked torch's CUDA (the CUDA wheel cannot be installed here)."""
    post = learner_def().split("%post", 1)[1]
    script = post.split("<<'CUDA'\n", 1)[1].split("\nCUDA\n", 1)[0].replace("{{ CUDA_VERSION }}", learner_cuda_default())
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text(f"class version:\n    cuda = {locked_torch_cuda()!r}\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False,
                          env={"PYTHONPATH": str(tmp_path), "PATH": os.environ["PATH"]})
    assert done.returncode == 0, done.stderr


def test_the_learner_image_installs_every_requirement_with_the_gpu_lock() -> None:
    text = learner_def()
    files = text.split("\n%files", 1)[1].split("\n%", 1)[0]
    assert re.search(r"^\s*constraints-gpu\.txt\s+/opt/wmrl/constraints-gpu\.txt$", files, re.MULTILINE)
    for args, constraints in pip_commands(text):
        if all(not a.startswith("/opt/") and canonicalize_name(Requirement(a).name) in BUILD_TOOLS for a in args):
            continue  # the build tools
        assert constraints == ["/opt/wmrl/constraints-gpu.txt"], f"pip install {' '.join(args)} without the lock"
