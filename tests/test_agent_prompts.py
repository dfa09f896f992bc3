"""The agent's system prompt has the seven segments of Appendix E and lists the REAL sandbox libraries."""

from __future__ import annotations

import importlib.metadata as md
import shutil
from pathlib import Path

import pytest

from wmrl.agent.prompts import PromptContext, agent_messages, system_prompt
from wmrl.sandbox import SandboxConfig, SandboxLimits, make_backend
from wmrl.sandbox.probe import probe_runtime, table_runtime

bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed (CI installs it)")

# One load-bearing phrase per segment, in the paper's order.
SEGMENT_MARKERS = {
    "full": ["MAXIMIZE your leaderboard Position Score", "PHASE 1 --- LAND A VALID SUBMISSION FIRST",
             "ENVIRONMENT CONTRACT", "Installed libraries you may import", "respond in TWO parts",
             "the environment returns your print() output", "Keep a valid submission as your fallback"],
    "short": ["Maximize the leaderboard Position Score", "Turn 1: a SIMPLE solution", "DATA_DIR (data folder)",
              "installed:", "Reply: 2-4 sentences", "You get your printed output", "Match the submission format"],
}


def ctx(runtime=None, gpus=0) -> PromptContext:
    return PromptContext(max_turns=4, timeout_s=1200, gpus=gpus, runtime=runtime or table_runtime())


@pytest.mark.parametrize("style", ["full", "short"])
def test_system_prompt_has_the_seven_segments_in_order(style):
    text = system_prompt(ctx(), style)
    positions = [text.index(marker) for marker in SEGMENT_MARKERS[style]]
    assert positions == sorted(positions)


def test_short_prompt_is_much_shorter():
    assert len(system_prompt(ctx(), "short")) < len(system_prompt(ctx(), "full")) / 2


def test_contract_names_both_paths_and_forbids_hardcoded_ones():
    text = system_prompt(ctx())
    assert "DATA_DIR" in text and "SUBMISSION_PATH" in text and "'/kaggle/...'" in text


def test_gpu_sentence_follows_the_sandbox():
    assert "GPU (~40 GB) is available" in system_prompt(ctx(gpus=1))
    assert "No GPU is available" in system_prompt(ctx(gpus=0))


def test_user_prompt_is_the_task_overview():
    messages = agent_messages("SYS", "Competition: x\nBegin.\n")
    assert messages == [{"role": "system", "content": "SYS"}, {"role": "user", "content": "Competition: x\nBegin.\n"}]


@bwrap
def test_probe_reports_the_sandbox_interpreters_real_versions(tmp_path: Path):
    runtime = probe_runtime(make_backend(SandboxConfig(backend="bwrap")), SandboxLimits(timeout_s=60), tmp_path)
    versions = {lib.name: lib.version for lib in runtime.libraries}
    assert versions["numpy"] == md.version("numpy") and versions["pandas"] == md.version("pandas")
    assert "xgboost" not in versions or versions["xgboost"] == md.version("xgboost")
    assert runtime.can_import("sklearn") is True and runtime.can_import("cv2") is False
    assert runtime.can_import("json") is True  # the standard library counts


@bwrap
def test_prompt_lists_the_probed_libraries_not_the_table(tmp_path: Path):
    runtime = probe_runtime(make_backend(SandboxConfig(backend="bwrap")), SandboxLimits(timeout_s=60), tmp_path)
    text = system_prompt(ctx(runtime))
    numpy_short = ".".join(md.version("numpy").split(".")[:2])
    assert f"numpy {numpy_short}" in text
    missing = [lib.name for lib in table_runtime().libraries if lib.name not in {x.name for x in runtime.libraries}]
    for name in missing:  # a Table 7 library this sandbox lacks is not promised
        assert f" {name} " not in text.replace(",", " ")
