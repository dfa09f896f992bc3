"""Session fixtures shared by test modules: the micro LLM agent and one uninterrupted ``wmrl train`` run
of it, the reference that resume tests (SIGKILL locally, ``scontrol requeue`` on Slurm) compare with."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def micro_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from models_support import build_tiny

    # A long context: with its small vocabulary the first prompt (system prompt + task overview) is a few
    # thousand tokens, and a trajectory that cannot fit its next turn stops before generating.
    return build_tiny(tmp_path_factory.mktemp("cache"), tmp_path_factory.mktemp("model") / "tiny",
                      max_position_embeddings=16384)


@pytest.fixture(scope="session")
def micro_run(tmp_path_factory: pytest.TempPathFactory, micro_model: Path) -> Path:
    """``wmrl train`` of the micro config, 2 steps, run to the end without interruption."""
    from train_support import micro_overrides, wmrl

    root = tmp_path_factory.mktemp("runs")
    done = wmrl("train", *micro_overrides(root, micro_model, "micro"))
    assert done.returncode == 0, done.stdout + done.stderr
    return root / "micro"
