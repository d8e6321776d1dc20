"""A small asyncio HTTP/1.1 server (h11) for fakes that must control the wire.

Fakes of remote services need to stream a response chunk by chunk, stall it, or drop
the connection mid-body; a full web framework hides exactly those moves. Each request
is read whole, then handed to one async handler with a `HttpResponse` to write to.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

import h11

__all__ = ["Handler", "Http1Server", "HttpRequest", "HttpResponse"]

_READ_CHUNK = 64 * 1024


@dataclass(frozen=True)
class HttpRequest:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    """Lower-case names; a repeated header keeps its last value."""
    body: bytes

    def param(self, name: str, default: str = "") -> str:
        values = self.query.get(name)
        return values[-1] if values else default


class HttpResponse:
    """Writes one response: `start`, any number of `send`, then `end` (or `abort`)."""

    def __init__(self, conn: h11.Connection, writer: asyncio.StreamWriter) -> None:
        self._conn = conn
        self._writer = writer
        self.started = False
        self.finished = False

    async def start(self, status: int, headers: Mapping[str, str]) -> None:
        self.started = True
        fields = [(name, value) for name, value in headers.items()]
        await self._write(h11.Response(status_code=status, headers=fields))

    async def send(self, data: bytes) -> None:
        if data:
            await self._write(h11.Data(data=data))

    async def end(self) -> None:
        await self._write(h11.EndOfMessage())
        self.finished = True

    async def reply(self, status: int, body: bytes, content_type: str) -> None:
        """A whole response with a Content-Length."""
        headers = {"content-type": content_type, "content-length": str(len(body))}
        await self.start(status, headers)
        await self.send(body)
        await self.end()

    async def reply_empty(self, status: int) -> None:
        await self.start(status, {})
        await self.end()

    async def reply_json(self, status: int, payload: Any) -> None:
        await self.reply(status, json.dumps(payload).encode(), "application/json")

    def abort(self) -> None:
        """Drop the connection at once with a TCP reset, as a dying host would."""
        sock = self._writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self._writer.transport.abort()
        self.finished = True

    async def _write(self, event: h11.Event) -> None:
        data = self._conn.send(event)
        if data:
            self._writer.write(data)
            await self._writer.drain()


Handler = Callable[[HttpRequest, HttpResponse], Awaitable[None]]


class Http1Server:
    """Serves `handler` on a loopback port; keep-alive, chunked responses."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._server = await asyncio.start_server(self._on_connect, host, port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # asyncio logs a cancelled connection callback as an error, so `close` cancels an
        # inner task instead.
        task = asyncio.create_task(self._serve(reader, writer))
        self._connections.add(task)
        try:
            await task
        except (ConnectionError, h11.ProtocolError, asyncio.CancelledError):
            pass
        finally:
            self._connections.discard(task)
            writer.transport.abort()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER)
        while True:
            request = await _read_request(conn, reader)
            if request is None:
                return
            response = HttpResponse(conn, writer)
            await self._handler(request, response)
            if not response.finished:
                if not response.started:
                    await response.reply(500, b"handler wrote no response", "text/plain")
                else:
                    await response.end()
            if writer.transport.is_closing() or conn.our_state is not h11.DONE:
                return
            if conn.their_state is not h11.DONE:
                return
            conn.start_next_cycle()


async def _read_request(conn: h11.Connection, reader: asyncio.StreamReader) -> HttpRequest | None:
    head: h11.Request | None = None
    body = bytearray()
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await reader.read(_READ_CHUNK))
        elif isinstance(event, h11.Request):
            head = event
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            assert head is not None
            return _to_request(head, bytes(body))
        elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
            return None


def _to_request(head: h11.Request, body: bytes) -> HttpRequest:
    target = urlsplit(head.target.decode("latin-1"))
    headers = {
        name.decode("latin-1").lower(): value.decode("latin-1") for name, value in head.headers
    }
    return HttpRequest(
        method=head.method.decode("ascii"),
        path=target.path,
        query=parse_qs(target.query, keep_blank_values=True),
        headers=headers,
        body=body,
    )
