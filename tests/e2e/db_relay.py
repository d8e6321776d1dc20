"""A TCP relay on loopback between a server and PostgreSQL, which a test can sever (every
connection through it dropped, new ones closed at once) and mend again: a replica cut off from
the database while the database and the other replicas stay up.

It runs its own event loop in a thread, so that it keeps relaying while the test blocks (a
server starting, a synchronous database read)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

__all__ = ["Relay", "relayed"]

_T = TypeVar("_T")


class Relay:
    """Relays 127.0.0.1:`port` to 127.0.0.1:`upstream_port` until `sever`, and after `mend`."""

    def __init__(self, upstream_port: int) -> None:
        self._upstream_port = upstream_port
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._severed = False
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None
        self.port = 0

    def start(self) -> None:
        self._thread.start()
        self._server = self._call(asyncio.start_server(self._relay, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]

    def stop(self) -> None:
        self.sever()
        if self._server is not None:
            self._server.close()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()

    def sever(self) -> None:
        """Drop every connection through the relay; close each new one at once."""
        self._call(self._sever())

    def mend(self) -> None:
        """Relay new connections again."""
        self._severed = False

    def _call(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    async def _sever(self) -> None:
        self._severed = True
        for writer in list(self._writers):
            writer.transport.abort()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._severed:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._upstream_port)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, up_writer}
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            self._writers -= {writer, up_writer}
            writer.transport.abort()
            up_writer.transport.abort()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.transport.abort()


@contextlib.contextmanager
def relayed(upstream_port: int) -> Iterator[Relay]:
    relay = Relay(upstream_port)
    relay.start()
    try:
        yield relay
    finally:
        relay.stop()
