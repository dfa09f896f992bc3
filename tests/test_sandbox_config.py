"""The ``sandbox`` config section: validation, limits, backend choice."""

from __future__ import annotations

import re

import pytest

from wmrl.config import ConfigError, load_config
from wmrl.sandbox import SandboxConfig, SandboxLimits, limits_from_config, make_backend
from wmrl.sandbox.bwrap import BwrapBackend


def test_limits_come_from_the_config() -> None:
    cfg = SandboxConfig(
        timeout_s=30, memory_mb=1000, max_procs=10, max_output_bytes=2048, gpus=1, max_file_mb=5,
        disk_quota_mb=700, max_files=900, max_wall_factor=2.5,
    )  # fmt: skip
    assert limits_from_config(cfg) == SandboxLimits(30.0, 1000, 10, 2048, 1, 5, 700, 900, 2.5)


def test_timeout_override_for_one_task() -> None:
    assert limits_from_config(SandboxConfig(), timeout_s=60).timeout_s == 60


def test_default_budget_is_the_papers_1200_seconds() -> None:
    assert limits_from_config(SandboxConfig()).timeout_s == 1200


def test_bwrap_is_the_default_backend() -> None:
    assert isinstance(make_backend(SandboxConfig()), BwrapBackend)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("sandbox.backend=docker", "sandbox.backend='docker' is not allowed"),
        ("sandbox.timeout_s=0", "sandbox.timeout_s=0.0 is out of range"),
        ("sandbox.max_procs=1", "sandbox.max_procs=1 is out of range"),
        ("sandbox.disk_quota_mb=0", "sandbox.disk_quota_mb=0 is out of range; allowed: [1, inf)"),
        ("sandbox.max_files=3", "sandbox.max_files=3 is out of range; allowed: [16, inf)"),
        (
            "sandbox.extra_binds=[relative/path]",
            "sandbox.extra_binds[0]='relative/path' is not allowed",
        ),
    ],
)
def test_bad_values_are_rejected_with_the_key(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(None, [override])
