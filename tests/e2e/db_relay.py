"""A TCP relay on loopback between a server and PostgreSQL, which a test can sever (every
connection through it dropped, new ones closed at once) and mend again: a replica cut off from
the database while the database and the other replicas stay up. A sever may pick the
connections whose start-up message names an application (`application_name`), such as the
listening connection alone.

It runs its own event loop in a thread, so that it keeps relaying while the test blocks (a
server starting, a synchronous database read)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine, Iterator, Mapping
from typing import Any, TypeVar
from urllib.parse import urlsplit

import pytest

from testing.server_process import ServerProcess

__all__ = ["Relay", "relayed", "relayed_pair"]

_T = TypeVar("_T")
_STARTUP_BYTES = 4096
"""How much of what a client sends first is kept to match a sever against (its start-up
message, after the SSL request)."""


class _Connection:
    def __init__(self, client: asyncio.StreamWriter, upstream: asyncio.StreamWriter) -> None:
        self.writers = (client, upstream)
        self.startup = bytearray()

    def abort(self) -> None:
        for writer in self.writers:
            writer.transport.abort()


class Relay:
    """Relays 127.0.0.1:`port` to 127.0.0.1:`upstream_port`, but the connections severed."""

    def __init__(self, upstream_port: int) -> None:
        self._upstream_port = upstream_port
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._severed: bytes | None = None
        self._connections: set[_Connection] = set()
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

    def sever(self, application: str = "") -> None:
        """Drop every connection (or those of `application`) and each new one at once."""
        self._call(
            self._sever(f"\0application_name\0{application}\0".encode() if application else b"")
        )

    def mend(self) -> None:
        """Relay new connections again."""
        self._severed = None

    def _call(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    async def _sever(self, matching: bytes) -> None:
        self._severed = matching
        for connection in list(self._connections):
            if matching in connection.startup:
                connection.abort()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._severed == b"":
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._upstream_port)
        except OSError:
            writer.transport.abort()
            return
        connection = _Connection(writer, up_writer)
        self._connections.add(connection)
        try:
            await asyncio.gather(
                self._pipe(reader, up_writer, connection), self._pipe(up_reader, writer, None)
            )
        finally:
            self._connections.discard(connection)
            connection.abort()

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        connection: _Connection | None,
    ) -> None:
        """Copy until either end closes; the client's side (`connection`) is matched against
        a sever as its start-up message comes in."""
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                if connection is not None and len(connection.startup) < _STARTUP_BYTES:
                    connection.startup += data[:_STARTUP_BYTES]
                    if self._severed is not None and self._severed in connection.startup:
                        break
                writer.write(data)
                await writer.drain()
        writer.transport.abort()
        if connection is not None:
            connection.abort()


@contextlib.contextmanager
def relayed(upstream_port: int) -> Iterator[Relay]:
    relay = Relay(upstream_port)
    relay.start()
    try:
        yield relay
    finally:
        relay.stop()


@contextlib.contextmanager
def relayed_pair(
    tmp_path_factory: pytest.TempPathFactory,
    database_url: str,
    names: tuple[str, str],
    env: Mapping[str, str],
) -> Iterator[tuple[ServerProcess, ServerProcess, Relay]]:
    """Two servers on the database (`env` on top, each its name as ROLLOUT_INSTANCE_ID), the
    first through a relay, the second directly; each must exit 0 at the end."""
    parts = urlsplit(database_url)
    assert parts.port is not None
    with relayed(parts.port) as relay:
        relayed_url = parts._replace(netloc=f"{parts.username}@127.0.0.1:{relay.port}").geturl()
        servers = [
            ServerProcess(
                tmp_path_factory.mktemp(f"relayed-{name}"),
                {**env, "ROLLOUT_DATABASE_URL": url, "ROLLOUT_INSTANCE_ID": name},
            )
            for name, url in zip(names, (relayed_url, database_url), strict=True)
        ]
        for server in servers:
            server.start()
        try:
            yield servers[0], servers[1], relay
        finally:
            relay.mend()
            for server in servers:
                assert server.stop() == 0, server.text()
