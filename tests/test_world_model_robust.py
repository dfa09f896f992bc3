"""Nothing a server or a model sends crashes the world model: the real WorldModelEnvironment + HTTPBackend
(all eight checks, the pre-check on) against a misbehaving OpenAI-compatible server on loopback."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from misbehaving_server import MIXED, MODES, completion, misbehaving_server

from wmrl.rollout import Submission
from wmrl.sandbox.libraries import SANDBOX_LIBRARIES
from wmrl.sandbox.probe import SandboxRuntime
from wmrl.world_model.backends import Completion, HTTPBackend
from wmrl.world_model.config import WorldModelConfig
from wmrl.world_model.env import TaskCase, WorldModelEnvironment
from wmrl.world_model.precheck import DataInventory
from wmrl.world_model.prompts import CHECK_NAMES

RUNTIME = SandboxRuntime("3.11", SANDBOX_LIBRARIES[:2], None, "table")
CODE = ("import pandas as pd\ntrain = pd.read_csv(DATA_DIR + '/train.csv')\n"
        "train.to_csv(SUBMISSION_PATH, index=False)\n")
FALLBACK_MODES = {"garbage": "no_json_object", "list_content": "malformed", "number_content": "malformed",
                  "null_content": "empty"}
FAILING_MODES = {"invalid_utf8": "MalformedResponse", "truncated_json": "MalformedResponse",
                 "html": "MalformedResponse", "empty_body": "MalformedResponse", "not_an_object": "MalformedResponse",
                 "deep_json": "MalformedResponse", "no_choices": "MalformedResponse",
                 "no_message": "MalformedResponse", "status_500": "InternalServerError",
                 "status_404": "NotFoundError", "reset": "APIConnectionError"}


def environment(url: str, tmp: Path, timeout_s: float = 10.0, retries: int = 1) -> WorldModelEnvironment:
    (tmp / "public").mkdir(exist_ok=True)
    (tmp / "public" / "train.csv").write_text("id,y\n1,0\n")
    case = TaskCase("Competition: T\nBegin.\n", DataInventory.from_dir(tmp / "public"), 40)
    backend = HTTPBackend(url, "m", 32, concurrency=8, timeout_s=timeout_s, retries=retries)
    return WorldModelEnvironment(backend, {"t": case}, WorldModelConfig(prompt_style="short"), RUNTIME)


def consistent(stats: dict[str, float]) -> bool:
    """The counters add up (the env module's docstring)."""
    checks = len(CHECK_NAMES)
    asked = stats.get("submissions", 0) - stats.get("precheck_settled", 0)
    verdicts = sum(v for k, v in stats.items() if k.startswith("verdict:"))
    failures = sum(v for k, v in stats.items() if k.startswith("failure:"))
    return (stats.get("calls", 0) == asked * checks
            and verdicts == (asked - stats.get("infrastructure_failures", 0)) * checks
            and failures == stats.get("infrastructure_failures", 0))


@pytest.mark.parametrize("mode, problem", sorted(FALLBACK_MODES.items()))
def test_an_answer_that_is_not_a_verdict_is_a_counted_fallback(mode, problem, tmp_path):
    with misbehaving_server(mode) as server:
        env = environment(server.url, tmp_path)
        fb = env.evaluate([Submission("k", "t", CODE)])[0]
    stats = env.stats()
    assert fb.score is not None and fb.status != "failed"
    assert stats["verdict:fallback"] == len(CHECK_NAMES) and stats[f"problem:{problem}"] == len(CHECK_NAMES)
    assert consistent(stats)


@pytest.mark.parametrize("mode", ["error_line_infinity", "error_line_1e400", "error_line_2.5"])
def test_an_error_line_that_is_no_line_number_is_repaired_not_a_crash(mode, tmp_path):
    with misbehaving_server(mode) as server:
        env = environment(server.url, tmp_path)
        fb = env.evaluate([Submission("k", "t", CODE)])[0]
    assert fb.status != "failed" and not fb.valid  # every check says fail with confidence 0.9
    assert all(v["error_line"] is None and v["status"] == "repaired" for v in fb.details["verdicts"])
    assert env.stats()["problem:error_line_not_an_int"] == len(CHECK_NAMES)


@pytest.mark.parametrize("mode, kind", sorted(FAILING_MODES.items()))
def test_a_body_that_is_no_chat_completion_is_a_counted_infrastructure_failure(mode, kind, tmp_path):
    with misbehaving_server(mode) as server:
        env = environment(server.url, tmp_path, retries=1)
        fb = env.evaluate([Submission("k", "t", CODE)])[0]
    stats = env.stats()
    assert (fb.score, fb.status) == (None, "failed") and kind in fb.details["error"]
    assert stats["infrastructure_failures"] == 1 and stats[f"failure:{kind}"] == 1
    assert server.counts[mode] == (len(CHECK_NAMES) if kind == "NotFoundError" else 2 * len(CHECK_NAMES))  # 404: no retry
    assert consistent(stats)


def test_a_rejected_request_is_a_fallback(tmp_path):
    with misbehaving_server("status_400") as server:
        env = environment(server.url, tmp_path)
        fb = env.evaluate([Submission("k", "t", CODE)])[0]
    assert fb.score is not None and env.stats()["problem:rejected"] == len(CHECK_NAMES)
    assert server.counts["status_400"] == len(CHECK_NAMES)  # never retried


def test_unreadable_token_counts_are_zero_and_noted(tmp_path):
    with misbehaving_server("bad_usage") as server:
        env = environment(server.url, tmp_path)
        fb = env.evaluate([Submission("k", "t", CODE)])[0]
    assert fb.score == 0.7 and fb.tokens == 0
    assert env.stats()["verdict:ok"] == len(CHECK_NAMES) and env.stats()["problem:bad_usage"] == len(CHECK_NAMES)


@pytest.mark.parametrize("mode", ["drip", "hang"])
def test_each_attempt_ends_at_its_deadline(mode, tmp_path):
    with misbehaving_server(mode, drip_s=0.5) as server:
        env = environment(server.url, tmp_path, timeout_s=2.0, retries=1)
        start = time.monotonic()
        fb = env.evaluate([Submission("k", "t", CODE)])[0]
        took = time.monotonic() - start
    # two attempts of 2 s and a 0.5 s backoff (the margin: a loaded machine); the drip alone takes ~150 s
    assert (fb.score, fb.status) == (None, "failed") and "Timeout" in fb.details["error"]
    assert 4.5 <= took < 15.0
    deadline = time.monotonic() + 30  # the abandoned reads end once their server is gone (left the `with`)
    while [t for t in threading.enumerate() if t.name == "wmrl-world-model-http"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [t for t in threading.enumerate() if t.name == "wmrl-world-model-http"]


@pytest.mark.parametrize("modes", [[m for m in MODES if m not in ("hang", "raw")], MIXED], ids=["every", "mixed"])
def test_a_mix_of_misbehaviours_never_raises_and_the_counts_add_up(modes, tmp_path):
    with misbehaving_server(modes, drip_s=0.2) as server:
        env = environment(server.url, tmp_path, timeout_s=1.5, retries=1)
        subs = [Submission(f"k{i}", "t", CODE + f"# variant {i}\n") for i in range(12)]
        fbs = env.evaluate(subs)
    stats = env.stats()
    assert len(fbs) == 12 and consistent(stats) and stats["infrastructure_failures"] >= 1
    assert len(server.counts) >= 8  # most modes were met
    if modes == MIXED:  # the requests' hashes put every check of some submissions on answering modes
        assert 1 <= stats["infrastructure_failures"] < 12 and stats["verdict:fallback"] >= 1


def test_a_backend_that_raises_is_an_infrastructure_failure(tmp_path):
    class Broken:
        def complete(self, requests):
            raise RuntimeError("bug")

    env = environment("http://127.0.0.1:9/v1", tmp_path)
    env.backend = Broken()
    fb = env.evaluate([Submission("k", "t", CODE)])[0]
    assert fb.status == "failed" and "RuntimeError" in fb.details["error"] and consistent(env.stats())


BODIES = (st.binary(max_size=200)
          | st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
                         lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                             st.sampled_from(["choices", "message", "content", "usage", "prompt_tokens", "x"]),
                             inner, max_size=3), max_leaves=10).map(lambda v: json.dumps(v).encode())
          | st.builds(lambda c, u: json.dumps(completion(c, u)).encode(),
                      st.none() | st.integers() | st.text(max_size=30) | st.lists(st.text(max_size=5), max_size=2),
                      st.dictionaries(st.sampled_from(["prompt_tokens", "completion_tokens"]),
                                      st.none() | st.integers() | st.floats() | st.text(max_size=3), max_size=2)))


def test_the_http_backend_never_raises_on_random_bodies():
    with misbehaving_server("raw") as server:
        backend = HTTPBackend(server.url, "m", 8, concurrency=1, timeout_s=5, retries=0)

        @settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
        @given(BODIES)
        def one(body):
            server.raw = body
            (c,) = backend.complete([[{"role": "user", "content": "x"}]])
            assert isinstance(c, Completion) and isinstance(c.text, str)
            assert isinstance(c.prompt_tokens, int) and isinstance(c.completion_tokens, int)
            assert c.error is None or c.error.split(":")[0] in ("failed", "malformed", "rejected")

        one()
