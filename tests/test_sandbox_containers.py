"""The Apptainer definition files: structure, and one library list shared with the prompts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from wmrl.sandbox.libraries import (
    SANDBOX_LIBRARIES,
    SANDBOX_PYTHON,
    pip_requirements,
    prompt_listing,
)

CONTAINERS = Path(__file__).resolve().parents[1] / "containers"


def parse_def(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(header, sections) of an Apptainer definition file."""
    header: dict[str, str] = {}
    sections: dict[str, str] = {}
    current = None
    for line in path.read_text().splitlines():
        if match := re.match(r"^%(\w+)\s*$", line):
            current = match.group(1)
            sections[current] = ""
        elif current is None:
            if match := re.match(r"^(\w+):\s*(\S.*)$", line):
                header[match.group(1)] = match.group(2)
        else:
            sections[current] += line + "\n"
    return header, sections


def heredoc(text: str, tag: str) -> list[str]:
    match = re.search(rf"<<'{tag}'\n(.*?)\n{tag}\n", text, re.DOTALL)
    assert match, f"no <<'{tag}' here-document"
    return [line.strip() for line in match.group(1).splitlines() if line.strip()]


@pytest.mark.parametrize("name", ["sandbox.def", "learner.def"])
def test_definition_has_bootstrap_from_and_the_needed_sections(name: str) -> None:
    header, sections = parse_def(CONTAINERS / name)
    assert header["Bootstrap"] == "docker" and header["From"]
    assert {"post", "environment", "runscript", "test"} <= set(sections)
    assert all(sections[s].strip() for s in ("post", "environment", "runscript"))


def test_sandbox_image_is_python_311() -> None:
    header, _ = parse_def(CONTAINERS / "sandbox.def")
    assert header["From"].startswith(f"python:{SANDBOX_PYTHON}")


def test_sandbox_image_installs_exactly_the_shared_library_list() -> None:
    _, sections = parse_def(CONTAINERS / "sandbox.def")
    assert heredoc(sections["post"], "REQUIREMENTS") == pip_requirements()


def test_prompt_listing_names_every_library_once() -> None:
    listed = [item.split()[0] for item in prompt_listing().split(", ")]
    assert listed == [lib.name for lib in SANDBOX_LIBRARIES]
    assert "torch 2.12 (CUDA)" in prompt_listing()


def test_learner_image_installs_the_training_stack_and_wmrl() -> None:
    _, sections = parse_def(CONTAINERS / "learner.def")
    post = sections["post"]
    for package in ("vllm", "deepspeed", "transformers", "/opt/wmrl"):
        assert package in post
    assert "wmrl /opt/wmrl/wmrl" in sections["files"]


def test_readme_gives_the_build_commands() -> None:
    readme = (CONTAINERS / "README.md").read_text()
    assert (
        "apptainer build" in readme
        and "containers/sandbox.def" in readme
        and "containers/learner.def" in readme
    )
