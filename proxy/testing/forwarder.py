"""A TCP forwarder on a loopback port the OS picks, in front of a server (PostgreSQL in the
tests and ``bench/store_outage.py``), that can fail the way networks do:

- ``partition()``: every byte either way is dropped, nothing is reset; connections stay open
  and new ones are accepted and swallowed too (a silent partition). ``heal()`` forwards again;
  what was dropped stays lost, as on a link that gave up retransmitting.
- ``down()``: every relayed connection is cut and the port refused (the database has gone
  away); ``up()`` serves again on the same port.

``ForwarderProcess`` is the same forwarder in a process of its own, driven over its stdin
(``python -m proxy.testing.forwarder PORT``): its relaying then never waits behind the driving
process's own work, as a load generator's would make it (one interpreter lock for both).
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import threading
from collections.abc import Coroutine
from typing import IO, Any


class Forwarder:
    def __init__(self, target_port: int = 5432, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self.partitioned = False
        self.dropped = 0  # bytes swallowed by partitions
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="forwarder")
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()

    def _call(self, coro: Coroutine[Any, Any, None]) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                if self.partitioned:
                    self.dropped += len(data)
                    continue
                writer.write(data)
                await writer.drain()
        writer.close()

    async def _swallow(self, reader: asyncio.StreamReader) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                self.dropped += len(data)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.CancelledError):  # stopped: asyncio must not log it
            await self._relay(reader, writer)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open.add(writer)
        ends = [writer]
        try:
            if self.partitioned:  # accepted (the kernel did), then nothing ever answers
                await self._swallow(reader)
                return
            try:
                up_reader, up_writer = await asyncio.open_connection(*self.target)
            except OSError:
                return
            ends.append(up_writer)
            self._open.add(up_writer)
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        finally:
            for w in ends:
                w.transport.abort()
                self._open.discard(w)

    async def _up(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _down(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._open):
            writer.transport.abort()
        self._open.clear()
        await self._server.wait_closed()

    def start(self) -> Forwarder:
        self._thread.start()
        self._call(self._up())
        return self

    def up(self) -> None:
        self._call(self._up())

    def down(self) -> None:
        self._call(self._down())

    def partition(self) -> None:
        self.partitioned = True

    def heal(self) -> None:
        self.partitioned = False

    async def _finish(self) -> None:
        if self._server is not None and self._server.is_serving():
            await self._down()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def stop(self) -> None:
        self._call(self._finish())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()


class ForwarderProcess:
    """``Forwarder``'s interface, served by a child process (see the module's docstring)."""

    def __init__(self, target_port: int = 5432, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self._proc: subprocess.Popen[str] | None = None

    def _ask(self, command: str) -> str:
        assert self._proc is not None and self._proc.stdin is not None
        assert self._proc.stdout is not None
        self._proc.stdin.write(command + "\n")
        self._proc.stdin.flush()
        return self._proc.stdout.readline().strip()

    def start(self) -> ForwarderProcess:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "proxy.testing.forwarder", str(self.target[1]),
             self.target[0]], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self._proc.stdout is not None
        self.port = int(self._proc.stdout.readline())
        return self

    def partition(self) -> None:
        self._ask("partition")

    def heal(self) -> None:
        self._ask("heal")

    def down(self) -> None:
        self._ask("down")

    def up(self) -> None:
        self._ask("up")

    @property
    def dropped(self) -> int:
        return int(self._ask("dropped"))

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._ask("stop")
            self._proc.wait(10)


def _serve_commands(forwarder: Forwarder, commands: IO[str], answers: IO[str]) -> None:
    actions = {"partition": forwarder.partition, "heal": forwarder.heal,
               "down": forwarder.down, "up": forwarder.up}
    for line in commands:
        command = line.strip()
        if command == "stop":
            forwarder.stop()
            print("ok", file=answers, flush=True)
            return
        if command == "dropped":
            print(forwarder.dropped, file=answers, flush=True)
            continue
        actions[command]()
        print("ok", file=answers, flush=True)
    forwarder.stop()  # the driving process is gone


if __name__ == "__main__":
    fwd = Forwarder(int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "127.0.0.1")
    print(fwd.start().port, flush=True)
    _serve_commands(fwd, sys.stdin, sys.stdout)
