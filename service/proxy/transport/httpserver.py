"""A lean HTTP/1.1 server on asyncio protocols and httptools (the parser uvicorn uses).

Why not a framework: the proxy sits on every model call, and a framework's per-request
machinery cost more than the whole budget (0.5 ms added at p50 on a slow 2-core machine;
aiohttp alone added ~1.2 ms here). This server does only what the proxy needs:
keep-alive, requests handled one at a time per connection in order, Content-Length or
chunked bodies in, Content-Length or chunked (streaming) responses out,
`Expect: 100-continue`, a body size limit, write back-pressure, cancelling the
handler when the client disconnects, a bound on open connections (`connections`), an
idle timeout: a connection must deliver a whole request within `idle_timeout_s` of
opening or of its previous response (slow-header clients are closed too), and the
headers a handler asks for (`keep_headers`; none by default: the proxy reads none).
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import cast

import httptools

from service.proxy.transport.connections import ConnectionLimit

__all__ = ["Handler", "HttpRequest", "HttpServerProtocol", "Responder"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class HttpRequest:
    method: str
    path: str
    """The request target without its query string."""
    body: bytes
    headers: Mapping[bytes, bytes] = field(default_factory=dict, repr=False)
    """The `keep_headers` the request carried, by lower-case name; a header sent twice is
    its values joined by ", " (so a check on it sees both). Not in the repr: one may be a
    credential."""


Handler = Callable[[HttpRequest, "Responder"], Awaitable[None]]
"""Answers one request through the responder; cancelled if the client disconnects."""


async def _closed(request: HttpRequest, responder: Responder) -> None:
    """The handler of a closed connection."""
    raise ConnectionResetError("the client disconnected")


def _head(status: int, extra: bytes, keep_alive: bool) -> bytes:
    reason = HTTPStatus(status).phrase.encode() if status in HTTPStatus._value2member_map_ else b""
    connection = b"" if keep_alive else b"Connection: close\r\n"
    return b"HTTP/1.1 %d %s\r\n%s%s\r\n" % (status, reason, extra, connection)


class Responder:
    """Writes the response to one request: `send` it whole, or `start_stream` + `write` + `end`."""

    def __init__(self, protocol: HttpServerProtocol, keep_alive: bool) -> None:
        self._protocol = protocol
        self.keep_alive = keep_alive
        self.started = False
        self.finished = False
        self._chunked = False
        self._held = b""
        """A stream's head, held to go out in one write with its first chunk."""

    def _transport_write(self, *data: bytes) -> None:
        transport = self._protocol.transport
        if transport is None or transport.is_closing():
            raise ConnectionResetError("the client disconnected")
        if self._held:
            data, self._held = (self._held, *data), b""
        transport.writelines(data)

    def send(self, status: int, body: bytes, content_type: bytes = b"application/json") -> None:
        """A whole response with Content-Length."""
        extra = b"Content-Type: %s\r\nContent-Length: %d\r\n" % (content_type, len(body))
        self.started = self.finished = True
        self._transport_write(_head(status, extra, self.keep_alive), body)

    def start_stream(
        self, status: int = 200, content_type: bytes = b"text/event-stream", *, hold: bool = False
    ) -> None:
        """Send the head of a chunked response; `hold` it to go out with the first chunk, in
        one write, when that chunk is about to be written (its bytes are already here)."""
        extra = b"Content-Type: %s\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n" % (
            content_type
        )
        self.started = self._chunked = True
        head = _head(status, extra, self.keep_alive)
        if hold:
            self._held = head
        else:
            self._transport_write(head)

    def flush(self) -> None:
        """Send a held head now."""
        if self._held:
            self._transport_write()

    def write(self, *parts: bytes) -> None:
        """One chunk of a streamed response, of `parts` in order, written without joining
        them (raises ConnectionResetError once the client left)."""
        size = sum(len(part) for part in parts)
        if size:
            self._transport_write(b"%x\r\n" % size, *parts, b"\r\n")

    def end(self) -> None:
        """Finish a streamed response."""
        if self._chunked and not self.finished:
            self.finished = True
            self._transport_write(b"0\r\n\r\n")

    async def drain(self) -> None:
        """Wait while the client reads slower than we write."""
        await self._protocol.writable()


class HttpServerProtocol(asyncio.Protocol):
    """One client connection."""

    def __init__(
        self,
        handler: Handler,
        max_body_bytes: int,
        *,
        connections: ConnectionLimit,
        idle_timeout_s: float,
        keep_headers: frozenset[bytes] = frozenset(),
    ) -> None:
        self._handler = handler
        self._keep_headers = keep_headers
        self._headers: dict[bytes, bytes] = {}
        self._max_body_bytes = max_body_bytes
        self._connections = connections
        self._idle_timeout_s = idle_timeout_s
        self._idle: asyncio.TimerHandle | None = None
        self._parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self._url = b""
        self._body: list[bytes] = []
        self._body_bytes = 0
        self._expect_continue = False
        self._queue: collections.deque[tuple[HttpRequest, bool]] = collections.deque()
        self._task: asyncio.Task[None] | None = None
        self._writable = asyncio.Event()
        self._writable.set()

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but have its interface.
        self.transport = cast(asyncio.Transport, transport)
        if not self._connections.admit(self):
            self.transport.abort()  # over the listener's limit: refused, its fd freed now
            return
        self._arm_idle()

    def close(self) -> None:
        """Close the connection (its route closed, or it idled out)."""
        if self.transport is not None:
            self.transport.close()

    def _arm_idle(self) -> None:
        self._disarm_idle()
        self._idle = asyncio.get_running_loop().call_later(self._idle_timeout_s, self.close)

    def _disarm_idle(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade):
            self._reject(400)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        # The parser and this protocol refer to each other, so a closed connection lives
        # until the garbage collector's next full pass; what it refers to must not. The
        # handler leads to a route, and so to every body the route remembers (the issue-21
        # server kept two 60 MiB bodies of an ended rollout this way).
        self._handler = _closed
        self._body = []
        self._disarm_idle()
        self._connections.release(self)
        self._queue.clear()
        self._writable.set()
        if self._task is not None:
            self._task.cancel()

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    async def writable(self) -> None:
        await self._writable.wait()

    # httptools callbacks
    def on_message_begin(self) -> None:
        self._url, self._body, self._body_bytes, self._expect_continue = b"", [], 0, False
        self._headers = {}

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"expect" and value.lower() == b"100-continue":
            self._expect_continue = True
        elif name in self._keep_headers:
            earlier = self._headers.get(name)
            self._headers[name] = value if earlier is None else b"%s, %s" % (earlier, value)

    def on_headers_complete(self) -> None:
        if self._expect_continue and self.transport is not None:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        if self._body_bytes > self._max_body_bytes:
            self._reject(413)
            return
        self._body.append(body)

    def on_message_complete(self) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        path = self._url.split(b"?", 1)[0].decode("latin-1")
        method = self._parser.get_method().decode("latin-1")
        request = HttpRequest(method, path, b"".join(self._body), self._headers)
        self._body, self._headers = [], {}
        self._disarm_idle()
        self._queue.append((request, self._parser.should_keep_alive()))
        if self._task is None:
            self._next()

    def _reject(self, status: int) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(_head(status, b"Content-Length: 0\r\n", keep_alive=False))
            self.transport.close()

    def _next(self) -> None:
        request, keep_alive = self._queue.popleft()
        self._task = asyncio.get_running_loop().create_task(self._serve(request, keep_alive))

    async def _serve(self, request: HttpRequest, keep_alive: bool) -> None:
        responder = Responder(self, keep_alive)
        try:
            await self._handler(request, responder)
        except ConnectionResetError:
            keep_alive = False
        except Exception:
            logger.exception(
                "proxy handler failed on %s %s", request.method, request.path.split("/")[-1]
            )
            if not responder.started and self.transport is not None:
                responder.keep_alive = keep_alive = False
                responder.send(500, b'{"error": {"message": "internal proxy error", "code": 500}}')
            keep_alive = False
        self._task = None
        if not (responder.finished and keep_alive):
            if self.transport is not None:
                self.transport.close()
        elif self._queue:
            self._next()
        else:
            self._arm_idle()
