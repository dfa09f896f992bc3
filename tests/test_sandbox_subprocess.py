"""The subprocess backend: no isolation, opt-in, and loud about it."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from wmrl.sandbox import SandboxConfig, SandboxLimits, make_backend


@pytest.fixture
def public(tmp_path: Path) -> Path:
    d = tmp_path / "public"
    d.mkdir()
    (d / "x.txt").write_text("hello")
    return d


def test_every_construction_logs_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        make_backend(SandboxConfig(backend="subprocess"))
        make_backend(SandboxConfig(backend="subprocess"))
    warnings = [r for r in caplog.records if "WITHOUT ISOLATION" in r.getMessage()]
    assert len(warnings) == 2


def test_runs_with_the_same_contract(public: Path, tmp_path: Path) -> None:
    backend = make_backend(SandboxConfig(backend="subprocess"))
    code = "import os\nprint(open(os.path.join(DATA_DIR, 'x.txt')).read(), os.environ['DATA_DIR'] == DATA_DIR)\nopen(SUBMISSION_PATH, 'w').write('s')"
    result = backend.run(code, public, tmp_path / "work", SandboxLimits(timeout_s=20))
    assert result.status == "ok" and result.stdout_tail == "hello True\n"
    assert Path(result.submission_path).read_text() == "s"


def test_timeout_still_applies(public: Path, tmp_path: Path) -> None:
    backend = make_backend(SandboxConfig(backend="subprocess"))
    result = backend.run("while True: pass", public, tmp_path / "work", SandboxLimits(timeout_s=1))
    assert result.status == "timeout" and result.wall_seconds - result.extra.get("held_back_seconds", 0.0) < 4
