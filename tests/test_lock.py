"""The CPU install is locked: constraints-cpu.txt pins every dependency of pyproject.toml within its
range, and the README's main command and scripts/test.sh (= CI) install with it."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11 (the lock's own Python)

ROOT = Path(__file__).resolve().parents[1]
LOCK = "constraints-cpu.txt"
LOCKED_EXTRAS = ("serving", "test")  # what `pip install -e '.[test]'` brings in; `gpu` keeps its ranges


def lock_pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for n, line in enumerate((ROOT / LOCK).read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, version = line.partition("==")
        assert sep and version and "+" not in version, f"{LOCK}:{n}: {line!r} is not an exact public pin NAME==VERSION"
        assert canonicalize_name(name) not in pins, f"{LOCK}:{n}: {name} pinned twice"
        pins[canonicalize_name(name)] = version
    return pins


def pyproject_requirements(groups: tuple[str, ...]) -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    texts = list(project["dependencies"]) + [r for g in groups for r in project["optional-dependencies"][g]]
    return [Requirement(t) for t in texts if canonicalize_name(Requirement(t).name) != "wmrl"]


def test_the_lock_pins_every_runtime_and_test_dependency_within_its_pyproject_range():
    pins = lock_pins()
    for req in pyproject_requirements(LOCKED_EXTRAS):
        name = canonicalize_name(req.name)
        assert name in pins, f"{LOCK} does not pin {req.name} (pyproject: {req}); run bash scripts/lock-cpu.sh"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"{LOCK} pins {req.name}=={pins[name]}, outside pyproject's {req}; run bash scripts/lock-cpu.sh")


def test_the_lock_leaves_wmrl_and_the_gpu_extra_out():
    pins = lock_pins()
    assert "wmrl" not in pins
    for req in pyproject_requirements(("gpu",)):
        if canonicalize_name(req.name) == "vllm":
            assert "vllm" not in pins, "the gpu extra keeps its own ranges: vLLM must not be locked"
    assert pins["torch"] == "2.13.0", "the CPU wheel the README installs first"


def pip_installs(text: str) -> list[list[str]]:
    """Every `pip install ...` command in a shell text, as argument lists (without `pip install`)."""
    commands = []
    for line in text.splitlines():
        if line.lstrip().startswith("#") or "pip install" not in line:
            continue
        for part in re.split(r"&&|;|\|\|", line):
            words = shlex.split(part, comments=True)
            if words[:2] == ["pip", "install"]:
                commands.append(words[2:])
    return commands


def package_installs(text: str) -> list[list[str]]:
    return [args for args in pip_installs(text) if args and not {"--upgrade", "-U"} & set(args)]


@pytest.mark.parametrize("where", ["scripts/test.sh", "README.md"])
def test_the_readme_command_and_the_test_script_install_from_the_lock(where):
    text = (ROOT / where).read_text()
    if where == "README.md":  # the main command: the first bash block of "The two commands"
        text = text.split("## The two commands", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    installs = package_installs(text)
    assert installs, f"{where} installs nothing"
    for args in installs:
        assert "-c" in args and args[args.index("-c") + 1] == LOCK, \
            f"{where}: pip install {' '.join(args)} skips -c {LOCK}"


def test_ci_runs_the_test_script():
    assert "bash scripts/test.sh" in (ROOT / ".ci/run").read_text()


def test_a_pip_install_without_the_lock_is_found():
    assert package_installs("pip install -q torch==2.13.0 && pip install -c other.txt -e .") == [
        ["-q", "torch==2.13.0"], ["-c", "other.txt", "-e", "."]]
    assert package_installs("pip install -q --upgrade pip") == []
