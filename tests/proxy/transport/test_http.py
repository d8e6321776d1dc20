"""The proxy's HTTP layer: what clients other than the happy path send."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import orjson
import pytest

from service.proxy.core import ProxyCore
from tests.proxy.conftest import OpenRollout, chat


@pytest.fixture
async def small_core() -> AsyncIterator[tuple[ProxyCore, int]]:
    core = ProxyCore(upstream_timeout_s=1.0, max_request_bytes=1024)
    port = await core.serve_tcp("127.0.0.1", 0)
    try:
        yield core, port
    finally:
        await core.close()


async def test_expect_100_continue_is_answered(open_rollout: OpenRollout) -> None:
    rollout = open_rollout()
    body = orjson.dumps(chat("hi"))
    host, port = rollout.base_url.split("/")[2].split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    path = rollout.chat_url.split(port, 1)[1]
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
    writer.write(f"{head}Content-Length: {len(body)}\r\n\r\n".encode())
    assert await asyncio.wait_for(reader.readline(), 5) == b"HTTP/1.1 100 Continue\r\n"
    assert await reader.readline() == b"\r\n"
    writer.write(body)
    assert (await asyncio.wait_for(reader.readline(), 5)).startswith(b"HTTP/1.1 200")
    writer.close()


async def test_an_oversized_request_is_refused(small_core: tuple[ProxyCore, int]) -> None:
    _, port = small_core
    async with httpx.AsyncClient() as client:
        response = await client.post(
            f"http://127.0.0.1:{port}/r/x/v1/chat/completions", content=b"x" * 4096
        )
    assert response.status_code == 413


@pytest.mark.parametrize("body", [b"not json", b"[]", b'{"model": "m"}'])
async def test_a_malformed_request_is_400_and_no_turn(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, body: bytes
) -> None:
    rollout = open_rollout()
    response = await agent.post(rollout.chat_url, content=body, headers=rollout.headers)
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert rollout.route.turn_count == 0


async def test_keep_alive_serves_many_requests_on_one_connection(open_rollout: OpenRollout) -> None:
    rollout = open_rollout()
    limits = httpx.Limits(max_connections=1)
    async with httpx.AsyncClient(limits=limits) as client:
        for _ in range(5):
            response = await client.post(rollout.chat_url, json=chat("hi"), headers=rollout.headers)
            assert response.status_code == 200
    assert [t.index for t in rollout.route.turns] == [0, 1, 2, 3, 4]
