"""A request cancelled before the upstream answered: its connection closes, so the upstream
(vLLM aborts a request whose client left) stops working on it."""

from __future__ import annotations

import asyncio

from service.proxy.transport.upstream import UpstreamPool, UpstreamTarget


async def test_a_request_cancelled_before_its_head_closes_the_connection() -> None:
    received = asyncio.Event()
    closed = asyncio.Event()

    async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        received.set()
        await reader.read()  # returns at EOF: the client closed the connection
        closed.set()
        writer.close()

    server = await asyncio.start_server(never_answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pool = UpstreamPool()
    target = UpstreamTarget(f"http://127.0.0.1:{port}/v1/chat/completions", {})

    async def call() -> None:
        async with pool.request(target, b"{}"):
            pass

    task = asyncio.ensure_future(call())
    await received.wait()
    task.cancel()
    await asyncio.wait([task])
    assert task.cancelled()
    await closed.wait()
    await pool.close()
    server.close()
    await server.wait_closed()
