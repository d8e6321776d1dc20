"""A lean HTTP/1.1 client for the upstream LLM endpoint: keep-alive pool, streamed bodies.

Same reason as `httpserver`: a general client's per-request cost exceeded the proxy's
whole budget. It sends one POST and yields the response body as it arrives; http and
https (TLS with the system's trust store); no HTTP proxies, no redirects, no compression
(the proxy asks for identity). A pooled connection that turns out to be closed before
any response byte arrived is retried once on a fresh one.

The host is resolved here and every address it resolves to judged (`addresses`) before one
is connected to: a name that leads to a cloud metadata or link-local address is refused,
and so is one that leads into a private range unless the target allows it (a caller's own
base URL, when the operator does not: `UpstreamTarget.private_ok`); the address judged is
the address connected to, so a name re-bound between admission and connection cannot slip
past.

Errors (all `UpstreamConnectionError`): `UpstreamUnreachable` (connect failed, or the
address refused) and `UpstreamDisconnected` (closed or garbled mid-response). Timeouts are
the caller's.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ipaddress
import socket
import ssl
from collections.abc import AsyncIterator, Mapping
from typing import cast
from urllib.parse import urlsplit

import httptools

from service.proxy.transport.addresses import address_problem

__all__ = [
    "UpstreamConnectionError",
    "UpstreamDisconnected",
    "UpstreamPool",
    "UpstreamResponse",
    "UpstreamTarget",
    "UpstreamUnreachable",
]

_PAUSE_BYTES = 1024 * 1024
"""Stop reading from the upstream while this much body waits to be consumed."""
_WRITE_SLICE_BYTES = 256 * 1024
"""A larger request body is written in slices of it, each once the transport has room:
asyncio's `writelines` joins its parts and buffers what the socket did not take at once,
two more copies of the body (a 60 MiB body held ~180 MiB more during the call)."""


class UpstreamConnectionError(Exception):
    """The upstream could not be talked to."""


class UpstreamUnreachable(UpstreamConnectionError):
    """Connecting failed (refused, DNS, TLS)."""


class UpstreamDisconnected(UpstreamConnectionError):
    """The connection closed, or sent invalid HTTP, before the response was complete."""


_WEIGHT_VERSION_BYTES = 256
"""The most of a weight version header a turn keeps."""


class _Connection(asyncio.Protocol):
    """One upstream connection; carries one response at a time."""

    def __init__(self, version_header: bytes = b"") -> None:
        self.transport: asyncio.Transport | None = None
        self._version_header = version_header
        self.weight_version = b""
        """The value of the response's `version_header` (the upstream's weight version)."""
        self._parser = httptools.HttpResponseParser(self)
        self._head: asyncio.Future[None] | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._writable = asyncio.Event()
        self._writable.set()
        self._chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._paused = False
        self._error: UpstreamDisconnected | None = None
        self.status = 0
        self.content_type = b""
        self._delimited = False
        self.received_any = False
        self.complete = False
        self.keep_alive = False
        self.request_sent = False
        """The whole request went out (else the connection is mid-request: not reusable)."""

    def begin(self) -> None:
        loop = asyncio.get_running_loop()
        self._head, self._waiter = loop.create_future(), None
        self.status, self.content_type, self.received_any, self.complete = 0, b"", False, False
        self._delimited, self.weight_version = False, b""

    async def head(self) -> None:
        assert self._head is not None
        await self._head

    @property
    def chunks_waiting(self) -> int:
        """Body pieces received and not yet taken by `next_chunk`."""
        return len(self._chunks)

    async def next_chunk(self) -> bytes | None:
        """The next body bytes, or None at the end of the response."""
        while not self._chunks:
            if self.complete:
                return None
            if self._error is not None:
                raise self._error
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        data = self._chunks.popleft()
        self._buffered -= len(data)
        if self._paused and self._buffered < _PAUSE_BYTES and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return data

    async def send(self, head: bytes, body: bytes) -> None:
        """Write a request without copying its body. Writing stops when the connection is
        lost (`head()` then raises) or the upstream answered before taking it all (an
        early error; the connection is then not reused)."""
        assert self.transport is not None
        self.request_sent = len(body) <= _WRITE_SLICE_BYTES
        if self.request_sent:
            self.transport.writelines((head, body))
            return
        self.transport.write(head)
        view = memoryview(body)
        for start in range(0, len(body), _WRITE_SLICE_BYTES):
            await self._writable.wait()
            if self.transport is None or self.status:
                return
            self.transport.write(view[start : start + _WRITE_SLICE_BYTES])
        self.request_sent = True

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but have its interface.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.received_any = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(UpstreamDisconnected(f"invalid HTTP from upstream: {exc}"))
            if self.transport is not None:
                self.transport.close()

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.keep_alive = False
        self._writable.set()
        if self.status and not self._delimited and not self.complete:
            self.on_message_complete()  # a body without length or chunking ends at EOF
        if not self.complete:
            self._fail(UpstreamDisconnected("upstream closed the connection mid-response"))

    def _fail(self, error: UpstreamDisconnected) -> None:
        self._error = error
        if self._head is not None and not self._head.done():
            self._head.set_exception(error)
        self._wake()

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"content-type":
            self.content_type = value.split(b";", 1)[0].strip().lower()
        elif name in (b"content-length", b"transfer-encoding"):
            self._delimited = True
        elif name == self._version_header:
            self.weight_version = value[:_WEIGHT_VERSION_BYTES]

    def on_headers_complete(self) -> None:
        self.status = self._parser.get_status_code()
        self._writable.set()  # a request still being written stops: it was answered
        if self._head is not None and not self._head.done():
            self._head.set_result(None)

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered >= _PAUSE_BYTES and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        self.complete = True
        self.keep_alive = self._parser.should_keep_alive()
        self._wake()


class UpstreamResponse:
    """A response whose head has arrived; read its body with `read()` or `iter_chunks()`."""

    def __init__(self, connection: _Connection) -> None:
        self._connection = connection
        self.status = connection.status
        self.content_type = connection.content_type.decode("latin-1")
        self.weight_version = connection.weight_version.decode("latin-1")
        """The upstream's weight version header ("" when it sent none, or none is asked)."""

    @property
    def buffered(self) -> bool:
        """Whether body bytes have arrived that `iter_chunks` has not yielded yet."""
        return bool(self._connection.chunks_waiting)

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        while (chunk := await self._connection.next_chunk()) is not None:
            yield chunk

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.iter_chunks()])


_Key = tuple[str, str, int, bool]
"""scheme, host, port, and whether a private address is allowed."""


class UpstreamTarget:
    """Where and how to POST: parsed once per route, not per request."""

    def __init__(self, url: str, headers: Mapping[str, str], *, private_ok: bool = True) -> None:
        parts = urlsplit(url)
        https = parts.scheme == "https"
        port = parts.port or (443 if https else 80)
        self.key: _Key = (parts.scheme, parts.hostname or "", port, private_ok)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        lines = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        self._head = f"POST {path} HTTP/1.1\r\nHost: {parts.netloc}\r\n{lines}".encode("latin-1")

    def __repr__(self) -> str:  # the head holds the API key
        return f"UpstreamTarget({self.key!r})"

    def message(self, body: bytes) -> tuple[bytes, bytes]:
        """Head and body, written together without copying the body."""
        return b"%sContent-Length: %d\r\n\r\n" % (self._head, len(body)), body


class UpstreamPool:
    """Keep-alive connections per (scheme, host, port). Use `request` as a context manager."""

    def __init__(self, *, max_idle_per_host: int = 256, version_header: str = "") -> None:
        """`version_header`: a response header naming the upstream's weight version."""
        self._version_header = version_header.lower().encode("latin-1")
        self._idle: dict[_Key, list[_Connection]] = {}
        self._max_idle = max_idle_per_host
        self._ssl: ssl.SSLContext | None = None

    async def close(self) -> None:
        for connections in self._idle.values():
            for connection in connections:
                if connection.transport is not None:
                    connection.transport.close()
        self._idle.clear()

    def request(self, target: UpstreamTarget, body: bytes) -> _Exchange:
        """POST `body`: `async with pool.request(...) as response: ...`."""
        return _Exchange(self, target.key, target.message(body))

    def _ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context()
        return self._ssl

    async def _connect(self, key: _Key) -> _Connection:
        scheme, host, port, private_ok = key
        context = self._ssl_context() if scheme == "https" else None
        try:
            addresses = await _judged_addresses(host, port, private_ok)
            for address in addresses[:-1]:
                with contextlib.suppress(OSError):
                    return await self._open(address, key, context)
            return await self._open(addresses[-1], key, context)
        except (OSError, ssl.SSLError) as exc:
            reason = exc.strerror or exc
            raise UpstreamUnreachable(f"cannot connect to {host}:{port}: {reason}") from exc

    async def _open(self, address: str, key: _Key, context: ssl.SSLContext | None) -> _Connection:
        _, host, port, _ = key
        _, connection = await asyncio.get_running_loop().create_connection(
            lambda: _Connection(self._version_header),
            address,
            port,
            ssl=context,
            server_hostname=host if context else None,
        )
        return connection

    def _acquire_idle(self, key: _Key) -> _Connection | None:
        idle = self._idle.get(key)
        while idle:
            connection = idle.pop()
            if connection.transport is not None and not connection.transport.is_closing():
                return connection
        return None

    def _release(self, key: _Key, connection: _Connection) -> None:
        reusable = (
            connection.complete
            and connection.keep_alive
            and connection.request_sent
            and connection.transport is not None
        )
        if reusable and len(self._idle.setdefault(key, [])) < self._max_idle:
            self._idle[key].append(connection)
        elif connection.transport is not None:
            connection.transport.close()


async def _judged_addresses(host: str, port: int, private_ok: bool) -> list[str]:
    """The addresses `host` resolves to, in the resolver's order; UpstreamUnreachable naming
    the address when any of them is one no upstream may be at (`addresses`). An address
    literal is itself: not sent to the resolver's threads, which a burst of new connections
    (calls retried after a pause aborted them) would queue behind the server's other work."""
    try:
        addresses = [str(ipaddress.ip_address(host))]
    except ValueError:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    for address in addresses:
        problem = address_problem(ipaddress.ip_address(address), allow_private=private_ok)
        if problem:
            raise UpstreamUnreachable(f"refused to connect to {host}:{port}: {problem}")
    return addresses


class _Exchange:
    """One request on a pooled connection; the connection returns to the pool on exit."""

    def __init__(self, pool: UpstreamPool, key: _Key, data: tuple[bytes, bytes]) -> None:
        self._pool, self._key, self._data = pool, key, data
        self._connection: _Connection | None = None

    async def __aenter__(self) -> UpstreamResponse:
        try:
            reused = self._pool._acquire_idle(self._key)
            if reused is not None and await self._send(reused):
                return UpstreamResponse(reused)
            fresh = await self._pool._connect(self._key)
            await self._send(fresh, retry_ok=False)
            return UpstreamResponse(fresh)
        except BaseException:
            # Cancelled (a paused call aborted, a route closed) or failed before the head: the
            # connection is dropped, so the upstream sees the request abandoned.
            if self._connection is not None and self._connection.transport is not None:
                self._connection.transport.close()
            raise

    async def _send(self, connection: _Connection, *, retry_ok: bool = True) -> bool:
        """Send and wait for the head; False when a reused connection died before answering."""
        self._connection = connection
        connection.begin()
        try:
            await connection.send(*self._data)
            await connection.head()
        except UpstreamDisconnected:
            if retry_ok and not connection.received_any:
                return False
            raise
        return True

    async def __aexit__(self, *exc_info: object) -> None:
        if self._connection is not None:
            self._pool._release(self._key, self._connection)
