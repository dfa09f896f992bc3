"""Security: hostile solutions try to open network connections, and fail fast."""

from __future__ import annotations

import socket
import threading

import test_security_common
from test_security_common import World, assert_contained, attack, snapshot

world = test_security_common.world  # the shared fixture


def test_connection_to_a_host_listener_on_loopback_never_arrives(world: World) -> None:
    before = snapshot(world.protected)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    port = server.getsockname()[1]
    accepted: list[tuple] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, addr = server.accept()
            except TimeoutError:
                continue
            accepted.append(addr)
            conn.close()

    listener = threading.Thread(target=accept, daemon=True)
    listener.start()
    code = f"""
import socket
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=2).sendall(b"leak")
    print("connected")
except OSError as e:
    print("refused", type(e).__name__)
"""
    try:
        result, grade = attack(world, code)
    finally:
        stop.set()
        listener.join()
        server.close()
    assert "refused ConnectionRefusedError" in result.stdout_tail
    assert accepted == []
    assert_contained(world, before, result, grade)


def test_public_address_is_unreachable_at_once(world: World) -> None:
    before = snapshot(world.protected)
    code = """
import errno, socket, time
for addr in [("1.1.1.1", 443), ("8.8.8.8", 53)]:
    t = time.monotonic()
    try:
        socket.create_connection(addr, timeout=3)
        print("connected", addr)
    except OSError as e:
        print("unreachable", addr, errno.errorcode.get(e.errno), round(time.monotonic() - t, 3))
try:
    socket.getaddrinfo("pypi.org", 443)
    print("resolved")
except OSError as e:
    print("no dns", type(e).__name__)
"""
    result, grade = attack(world, code)
    lines = [line for line in result.stdout_tail.splitlines() if line.startswith("unreachable")]
    # ENETUNREACH: no route at all, so no packet left the sandbox (not a timeout after trying).
    assert len(lines) == 2 and all("ENETUNREACH" in line for line in lines)
    assert all(float(line.split()[-1]) < 0.5 for line in lines)
    assert "no dns" in result.stdout_tail
    assert_contained(world, before, result, grade)
