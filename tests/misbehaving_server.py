"""A small OpenAI-compatible ``/v1/chat/completions`` server on loopback that misbehaves on purpose.

Each request is answered in one *mode*; with several modes, a request's mode is picked by a hash of
its body, so a retried request meets the same misbehaviour again (a failing mode stays failing past the
client's retries) and a batch of different prompts meets a mix. The server stops itself after
``lifetime_s`` seconds at the latest (hanging and dripping handlers give up then too), so a test that
forgets it cannot leave it running.

Modes (``MODES``): what a broken server or a broken model can send with status 200, the HTTP failures,
and the slow ones (``drip`` sends the whole response one byte per ``drip_s`` seconds; ``hang`` never
answers).
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PASS = {"reason": "ok", "verdict": "pass", "confidence": 0.7, "error_type": None, "error_line": None,
        "env_feedback": ""}
FAIL = {"reason": "boom", "verdict": "fail", "confidence": 0.9, "error_type": "ValueError", "error_line": 1,
        "env_feedback": "ValueError: boom"}


def completion(content: object, usage: object = None) -> dict:
    return {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            "usage": usage if usage is not None else {"prompt_tokens": 11, "completion_tokens": 5,
                                                      "total_tokens": 16}}


def _fail_with_line(raw: str) -> str:
    return json.dumps(FAIL).replace('"error_line": 1', f'"error_line": {raw}')


# mode -> (status, content type, body); the slow and broken-connection modes are handled apart.
BODIES: dict[str, tuple[int, str, bytes]] = {
    "ok": (200, "application/json", json.dumps(completion(json.dumps(PASS))).encode()),
    "fail": (200, "application/json", json.dumps(completion(json.dumps(FAIL))).encode()),
    "garbage": (200, "application/json", json.dumps(completion("I think it is fine.")).encode()),
    "invalid_utf8": (200, "application/json", b'{"choices": [{"message": {"content": "\xff\xfe\xfa"}}]}'),
    "truncated_json": (200, "application/json", json.dumps(completion(json.dumps(PASS))).encode()[:60]),
    "html": (200, "text/html", b"<html><body><h1>Welcome to nginx!</h1></body></html>"),
    "empty_body": (200, "application/json", b""),
    "not_an_object": (200, "application/json", b"[1, 2, 3]"),
    "deep_json": (200, "application/json", b"[" * 100_000 + b"]" * 100_000),
    "no_choices": (200, "application/json", json.dumps({"id": "x", "choices": []}).encode()),
    "no_message": (200, "application/json",
                   json.dumps({"id": "x", "choices": [{"index": 0, "finish_reason": "stop"}]}).encode()),
    "list_content": (200, "application/json",
                     json.dumps(completion([{"type": "text", "text": json.dumps(PASS)}])).encode()),
    "number_content": (200, "application/json", json.dumps(completion(42)).encode()),
    "null_content": (200, "application/json", json.dumps(completion(None)).encode()),
    "bad_usage": (200, "application/json",
                  json.dumps(completion(json.dumps(PASS), {"prompt_tokens": "n/a", "completion_tokens": [1]})).encode()),
    "error_line_infinity": (200, "application/json", json.dumps(completion(_fail_with_line("Infinity"))).encode()),
    "error_line_1e400": (200, "application/json", json.dumps(completion(_fail_with_line("1e400"))).encode()),
    "error_line_2.5": (200, "application/json", json.dumps(completion(_fail_with_line("2.5"))).encode()),
    "status_400": (400, "application/json", b'{"error": {"message": "prompt too long", "type": "invalid_request"}}'),
    "status_404": (404, "application/json", b'{"error": {"message": "no such model"}}'),
    "status_500": (500, "application/json", b'{"error": {"message": "internal"}}'),
}
SLOW = ("drip", "hang")
BROKEN = ("reset",)
RAW = "raw"  # status 200 with the body in ``Misbehaving.raw`` (set by a fuzz test between requests)
MODES = tuple(BODIES) + SLOW + BROKEN + (RAW,)
# A mostly working server: good answers, the model's garbage (fallbacks), a rejected request, and a few
# answers no retry fixes (failures), so a batch sees every outcome.
MIXED = ("ok",) * 8 + ("fail", "garbage", "list_content", "number_content", "null_content", "bad_usage",
                       "error_line_2.5", "status_400", "html", "drip", "reset")


@dataclass
class Misbehaving:
    url: str
    modes: Sequence[str]
    counts: Counter = field(default_factory=Counter)  # requests answered per mode
    raw: bytes = b""  # the body of mode "raw"


@contextmanager
def misbehaving_server(modes: Sequence[str] | str = ("ok",), drip_s: float = 1.0,
                       lifetime_s: float = 120.0) -> Iterator[Misbehaving]:
    modes = [modes] if isinstance(modes, str) else list(modes)
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise ValueError(f"unknown modes {unknown}; choose from {', '.join(MODES)}")
    stop = threading.Event()
    lock = threading.Lock()
    state = Misbehaving("", modes)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            mode = modes[int(hashlib.sha256(body).hexdigest(), 16) % len(modes)]
            with lock:
                state.counts[mode] += 1
            try:
                self._answer(mode)
            except OSError:  # the client gave up first (its deadline): nothing more to send
                pass

        def _answer(self, mode: str) -> None:
            if mode == "hang":
                stop.wait()
                return
            if mode == "reset":
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return
            status, ctype, payload = ((200, "application/json", state.raw) if mode == RAW
                                      else BODIES["ok" if mode == "drip" else mode])
            head = (f"HTTP/1.1 {status} X\r\nContent-Type: {ctype}\r\nContent-Length: {len(payload)}\r\n"
                    "Connection: close\r\n\r\n").encode()
            self.close_connection = True
            if mode != "drip":
                self.wfile.write(head + payload)
                return
            for i in range(len(head + payload)):
                if stop.wait(drip_s):
                    return
                self.wfile.write((head + payload)[i:i + 1])
                self.wfile.flush()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    timer = threading.Timer(lifetime_s, stop.set)  # the lifetime bound: handlers end, then the server
    timer.daemon = True
    timer.start()
    watcher = threading.Thread(target=lambda: (stop.wait(), server.shutdown()), daemon=True)
    watcher.start()
    try:
        yield state
    finally:
        stop.set()
        timer.cancel()
        watcher.join(timeout=10)
        server.server_close()
        time.sleep(0)  # let handler threads see the stop event
