"""The upstream client judges the address it connects to: a name or form that leads to a
cloud metadata or link-local address is refused, and never connected to (issue 21)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import orjson
import pytest

from service.proxy.transport.upstream import UpstreamPool, UpstreamTarget, UpstreamUnreachable
from testing.fakes.llm_upstream import FakeUpstream

_CHAT = orjson.dumps({"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]})


@pytest.fixture
async def pool() -> AsyncIterator[UpstreamPool]:
    pool = UpstreamPool()
    yield pool
    await pool.close()


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("169.254.169.254", "169.254.169.254 is a cloud metadata address"),
        ("2852039166", "169.254.169.254 is a cloud metadata address"),  # the resolver's reading
        ("0251.0376.0251.0376", "169.254.169.254 is a cloud metadata address"),
        ("[::ffff:169.254.169.254]", "169.254.169.254 is a cloud metadata address"),
        ("169.254.0.1", "169.254.0.1 is a link-local address"),
        ("[fe80::1]", "fe80::1 is a link-local address"),
        ("[::169.254.169.254]", "169.254.169.254 is a cloud metadata address"),
        ("[64:ff9b::a9fe:a9fe]", "169.254.169.254 is a cloud metadata address"),
        ("[2002:a9fe:0001::]", "169.254.0.1 is a link-local address"),
    ],
)
async def test_a_metadata_or_link_local_address_is_refused_at_connect(
    pool: UpstreamPool, host: str, address: str
) -> None:
    target = UpstreamTarget(f"http://{host}/latest/meta-data/v1/chat/completions", {})
    with pytest.raises(UpstreamUnreachable) as caught:
        # the bound only guards a regression (a real connect attempt) from hanging the suite
        await asyncio.wait_for(pool.request(target, _CHAT).__aenter__(), 30)
    assert str(caught.value).endswith(f": {address}")
    assert "refused to connect" in str(caught.value)


async def test_loopback_by_name_is_reached(pool: UpstreamPool) -> None:
    """ "localhost" may resolve to ::1 first, where nothing listens: the next address is tried."""
    async with FakeUpstream() as upstream:
        target = UpstreamTarget(f"http://localhost:{upstream.port}/v1/chat/completions", {})
        async with pool.request(target, _CHAT) as response:
            assert response.status == 200
            assert b"Done." in await response.read()


async def test_a_name_resolving_into_a_private_range_is_refused_unless_allowed(
    pool: UpstreamPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A caller's base URL whose name resolves to 10.x (DNS rebinding, or an internal name)
    is judged at connect time, as a literal private address is at admission."""
    loop = asyncio.get_running_loop()

    async def resolve(host: str, port: int, **_: object) -> list[tuple[object, ...]]:
        assert host == "llm.example.test"
        return [(2, 1, 6, "", ("10.1.2.3", port))]

    monkeypatch.setattr(loop, "getaddrinfo", resolve)
    url = "http://llm.example.test:8000/v1/chat/completions"
    refused = UpstreamTarget(url, {}, private_ok=False)
    with pytest.raises(UpstreamUnreachable, match=r"10\.1\.2\.3 is in a private range"):
        await asyncio.wait_for(pool.request(refused, _CHAT).__aenter__(), 30)
    assert refused.key != UpstreamTarget(url, {}).key  # never pooled with an allowed target
