"""The upstream client writing request bodies: a big one without copies of it, and a
connection whose request was answered before it was all written never reused."""

from __future__ import annotations

import asyncio
import tracemalloc
from collections.abc import AsyncIterator

import pytest

from service.proxy.transport.upstream import UpstreamPool, UpstreamTarget

MIB = 1024 * 1024


class _Upstream:
    """A raw HTTP/1.1 upstream: reads each request's body (counting it, keeping none) and
    answers 200, or answers 413 at once, unread, when told to."""

    def __init__(self) -> None:
        self.bodies: list[int] = []
        self.connections = 0
        self.refuse_next = False

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                if self.refuse_next:
                    self.refuse_next = False
                    writer.write(b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 0\r\n\r\n")
                    await writer.drain()
                    await reader.read()  # keeps the connection open, reads on
                    return
                got = 0
                while got < length:
                    got += len(await reader.read(min(length - got, 1 << 16)))
                self.bodies.append(got)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def upstream() -> AsyncIterator[tuple[_Upstream, UpstreamTarget]]:
    fake = _Upstream()
    server = await asyncio.start_server(fake.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield fake, UpstreamTarget(f"http://127.0.0.1:{port}/v1/chat/completions", {})
    finally:
        server.close()


async def post(pool: UpstreamPool, target: UpstreamTarget, body: bytes) -> tuple[int, bytes]:
    async with pool.request(target, body) as response:
        return response.status, await response.read()


async def test_a_big_body_goes_out_whole_without_copies_of_it(
    upstream: tuple[_Upstream, UpstreamTarget],
) -> None:
    fake, target = upstream
    body = b"x" * (32 * MIB)
    pool = UpstreamPool()
    tracemalloc.start()
    try:
        assert await post(pool, target, body) == (200, b"{}")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        await pool.close()
    assert fake.bodies == [len(body)]
    # asyncio's writelines held two more copies (its join, and the part the socket did not take)
    assert peak < len(body) // 4, f"{peak / MIB:.1f} MiB allocated while sending"


async def test_a_request_answered_before_it_was_all_written_is_not_reused(
    upstream: tuple[_Upstream, UpstreamTarget],
) -> None:
    fake, target = upstream
    fake.refuse_next = True
    pool = UpstreamPool()
    try:
        assert (await post(pool, target, b"y" * (8 * MIB)))[0] == 413
        # On the same connection, this request would be read as the rest of the first body.
        assert await post(pool, target, b"{}") == (200, b"{}")
    finally:
        await pool.close()
    assert fake.connections == 2
    assert fake.bodies == [2]
