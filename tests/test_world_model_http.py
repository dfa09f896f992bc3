"""The HTTP world-model client: same verdicts as in-process against a real `transformers serve`; limits,
retries and failures against small real HTTP servers on loopback."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
from agent_support import tiny_model, tokenizer

from wmrl.generation.hf import TransformersGenerator
from wmrl.rollout import Submission
from wmrl.sandbox.libraries import SANDBOX_LIBRARIES
from wmrl.sandbox.probe import SandboxRuntime
from wmrl.world_model.backends import HTTPBackend, InProcessBackend
from wmrl.world_model.config import WorldModelConfig
from wmrl.world_model.env import TaskCase, WorldModelEnvironment
from wmrl.world_model.precheck import DataInventory

CHECKS = ["files_columns", "quality"]
CODES = ["import pandas as pd\ntrain = pd.read_csv(DATA_DIR + '/train.csv')\nprint(train['label'])\n",
         "import pandas as pd\ntrain = pd.read_csv(DATA_DIR + '/train.csv')\ntrain.to_csv(SUBMISSION_PATH)\n"]
PASS = json.dumps({"reason": "ok", "verdict": "pass", "confidence": 0.7, "error_type": None, "error_line": None,
                   "env_feedback": ""})


# A short library list keeps the prompts short.
RUNTIME = SandboxRuntime("3.11", SANDBOX_LIBRARIES[:2], None, "table")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def environment(backend, tmp: Path) -> WorldModelEnvironment:
    (tmp / "public").mkdir(exist_ok=True)
    (tmp / "public" / "train.csv").write_text("id,y\n1,0\n")
    case = TaskCase("Competition: T\nBegin.\n", DataInventory.from_dir(tmp / "public"), 40)
    return WorldModelEnvironment(backend, {"t": case}, WorldModelConfig(checks=CHECKS, precheck=False,
                                                                       prompt_style="short"), RUNTIME)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("served")
    tok = tokenizer()
    # Random weights drawn wide (initializer_range 0.5), so greedy decoding says something different
    # for every prompt instead of repeating one token: there is real text to compare.
    model = tiny_model(initializer_range=0.5)
    model.config.eos_token_id = model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model_dir = tmp / "model"
    model.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    with open(tmp / "serve.log", "w") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "transformers.cli.transformers", "serve", "--device", "cpu", "--host", "127.0.0.1",
             "--port", str(port), str(model_dir)],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("transformers serve did not come up:\n" + (tmp / "serve.log").read_text()[-3000:])
                time.sleep(1)
        yield model, model_dir, f"http://127.0.0.1:{port}/v1", tmp
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def verdicts(feedback):
    return [(v["check"], v["verdict"], v["confidence"], v["error_type"], v["error_line"], v["status"])
            for v in feedback.details["verdicts"]]


@pytest.mark.slow
def test_served_model_gives_the_same_verdicts_as_in_process(served):
    model, model_dir, url, tmp = served
    subs = [Submission(f"k{i}", "t", code) for i, code in enumerate(CODES)]
    http = environment(HTTPBackend(url, str(model_dir), max_new_tokens=96, concurrency=2, timeout_s=120), tmp)
    local = environment(InProcessBackend(TransformersGenerator(model, tokenizer()), max_new_tokens=96), tmp)
    remote, here = http.evaluate(subs), local.evaluate(subs)
    texts = [r for f in here for r in f.details["raw"]]
    assert len(set(texts)) == len(texts) and all(len(t) > 20 for t in texts)  # four different real answers
    assert [r for f in remote for r in f.details["raw"]] == texts
    assert [verdicts(f) for f in remote] == [verdicts(f) for f in here]
    assert [f.score for f in remote] == [f.score for f in here]
    # The same prompt tokens on both sides: the server renders the same chat template.
    assert [f.tokens for f in remote] == [f.tokens for f in here]


class Handler(BaseHTTPRequestHandler):
    state: ClassVar[dict] = {}

    def log_message(self, *args):
        pass

    def do_POST(self):
        s = self.state
        with s["lock"]:
            s["in_flight"] += 1
            s["max_in_flight"] = max(s["max_in_flight"], s["in_flight"])
            s["requests"] += 1
            fail = s["requests"] <= s["fail_first"]
        time.sleep(s["delay"])
        with s["lock"]:
            s["in_flight"] -= 1
        if fail:
            self.send_response(503)
            self.end_headers()
            return
        body = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                           "choices": [{"index": 0, "finish_reason": "stop",
                                        "message": {"role": "assistant", "content": PASS}}],
                           "usage": {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16}}).encode()
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except BrokenPipeError:  # the client timed out first (the timeout test)
            pass


@pytest.fixture
def fake_server():
    Handler.state = {"lock": threading.Lock(), "in_flight": 0, "max_in_flight": 0, "requests": 0, "fail_first": 0,
                     "delay": 0.05}
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", Handler.state
    server.shutdown()


def test_no_more_requests_in_flight_than_the_concurrency_limit(fake_server, tmp_path):
    url, state = fake_server
    env = environment(HTTPBackend(url, "m", 32, concurrency=3, timeout_s=10, retries=0), tmp_path)
    fbs = env.evaluate([Submission(f"k{i}", "t", CODES[1]) for i in range(6)])
    assert state["requests"] == 12 and state["max_in_flight"] <= 3
    assert all(f.score == 0.7 for f in fbs) and fbs[0].tokens == 2 * 16


def test_server_errors_are_retried(fake_server, tmp_path):
    url, state = fake_server
    state["fail_first"] = 2
    env = environment(HTTPBackend(url, "m", 32, concurrency=1, timeout_s=10, retries=3), tmp_path)
    fb = env.evaluate([Submission("k", "t", CODES[1])])[0]
    assert fb.score == 0.7 and state["requests"] == 4


def test_a_server_that_stays_down_gives_no_score_not_a_crash(tmp_path):
    env = environment(HTTPBackend(f"http://127.0.0.1:{free_port()}/v1", "m", 32, timeout_s=2, retries=1), tmp_path)
    fb = env.evaluate([Submission("k", "t", CODES[1])])[0]
    assert (fb.score, fb.status) == (None, "failed") and "APIConnectionError" in fb.details["error"]
    assert env.stats()["infrastructure_failures"] == 1


def test_a_request_slower_than_the_timeout_fails_after_its_retries(fake_server, tmp_path):
    url, state = fake_server
    state["delay"] = 3.0
    start = time.monotonic()
    env = environment(HTTPBackend(url, "m", 32, concurrency=1, timeout_s=0.5, retries=1), tmp_path)
    fb = env.evaluate([Submission("k", "t", CODES[1])])[0]
    assert fb.score is None and "Timeout" in fb.details["error"] and time.monotonic() - start < 15


def test_a_stopping_coordinator_abandons_the_batch_in_flight_and_starts_no_more(fake_server, tmp_path):
    # SIGTERM while the world model's batch runs in the agent's worker thread: the coordinator's exit
    # joins that thread, so the batch must end once the run's stop_event is set (not after every request
    # has had its time, wmrl/orchestration/anchors.py AnchorRunner.stop).
    url, state = fake_server
    state["delay"] = 6.0  # each request: 6 s; the batch of 6 at concurrency 2 would take ~18-36 s
    stop = threading.Event()
    env = environment(HTTPBackend(url, "m", 32, concurrency=2, timeout_s=120, retries=3, stop=stop), tmp_path)
    stopped_at: list[float] = []

    def stop_once_two_are_in_flight() -> None:  # not a timer: a loaded machine may take seconds to send them
        deadline = time.monotonic() + 60
        while state["in_flight"] < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        stopped_at.append(time.monotonic())
        stop.set()

    threading.Thread(target=stop_once_two_are_in_flight, daemon=True).start()
    fbs = env.evaluate([Submission(f"k{i}", "t", CODES[1]) for i in range(6)])
    assert stopped_at and time.monotonic() - stopped_at[0] < 3.0  # well before the 6 s answers
    assert all(f.score is None and f.status == "failed" and "Stopped" in f.details["error"] for f in fbs)
    assert state["requests"] == 2  # the two in flight; the other requests never started
    # the abandoned reads end when the server answers (no thread of this test outlives it)
    deadline = time.monotonic() + 30
    while [t for t in threading.enumerate() if t.name == "wmrl-world-model-http"] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [t for t in threading.enumerate() if t.name == "wmrl-world-model-http"]
