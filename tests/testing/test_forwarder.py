"""The TCP forwarder (``proxy.testing.forwarder``) in front of a loopback echo server: bytes go
through, a partition swallows them without a reset, ``down`` refuses the port and ``up``
serves it again."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from proxy.testing.forwarder import Forwarder


@pytest.fixture
def echo() -> Iterator[int]:
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            threading.Thread(target=pump, args=(conn,), daemon=True).start()

    def pump(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(4096):
                conn.sendall(data)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(5)
    server.close()


def say(port: int, data: bytes, timeout: float = 5) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        return s.recv(4096)


def test_bytes_go_through_and_a_partition_swallows_them(echo: int) -> None:
    f = Forwarder(echo).start()
    try:
        assert f.port and say(f.port, b"hello") == b"hello"
        f.partition()
        with pytest.raises(TimeoutError):  # accepted, then nothing ever answers
            say(f.port, b"lost", timeout=0.3)
        for _ in range(500):  # swallowed on the forwarder's own thread: poll, no timing
            if f.dropped >= 4:
                break
            time.sleep(0.01)
        assert f.dropped >= 4
        f.heal()
        assert say(f.port, b"back") == b"back"
    finally:
        f.stop()


def test_down_refuses_the_port_and_up_serves_it_again(echo: int) -> None:
    f = Forwarder(echo).start()
    try:
        port = f.port
        f.down()
        with pytest.raises(ConnectionRefusedError):
            say(port, b"x")
        f.up()
        assert f.port == port and say(port, b"again") == b"again"
    finally:
        f.stop()
