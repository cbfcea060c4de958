"""A TCP forwarder on a loopback port the OS picks, in front of a server (PostgreSQL in the
tests and ``bench/store_outage.py``), that can fail the way networks do:

- ``partition()``: every byte either way is dropped, nothing is reset; connections stay open
  and new ones are accepted and swallowed too (a silent partition). ``heal()`` forwards again;
  what was dropped stays lost, as on a link that gave up retransmitting.
- ``down()``: every relayed connection is cut and the port refused (the database has gone
  away); ``up()`` serves again on the same port.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine
from typing import Any


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
