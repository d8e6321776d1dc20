"""A route answers its own sandbox only (issue 9, trajectory integrity), and no client can
hold the proxy's connections (issue 9, resources). Real bubblewrap sandboxes, made warm
before any route exists, and the real proxy."""

from __future__ import annotations

import asyncio
import shlex
import shutil
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from service.config import Settings
from service.engine.model_access import ModelRouter
from service.models import (
    CaptureSpec,
    EndpointSpec,
    NetworkPolicy,
    RolloutSpec,
    SandboxSpec,
    TaskSpec,
    Turn,
)
from service.proxy import CaptureProxy, ResolvedEndpoint, Route
from service.sandboxes.base import PROXY_DIR, SandboxRequest
from service.sandboxes.local.backend import LocalBackend, LocalSandbox
from testing.fakes.llm_upstream import FakeUpstream, Reply
from tests.e2e.processes import eventually
from tests.proxy.conftest import UPSTREAM_KEY, UPSTREAM_MODEL, chat

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

CALL = """python3 - <<'PY'
import json, os, urllib.request
request = urllib.request.Request(
    os.environ["BASE_URL"] + "/chat/completions",
    data=json.dumps({"model": "m", "messages": [{"role": "user", "content": "MARK"}]}).encode(),
    headers={"Authorization": "Bearer " + os.environ["API_KEY"]})
print(urllib.request.urlopen(request, timeout=30).status)
PY"""


@pytest.fixture
def settings(state_dir: Path, tmp_path: Path) -> Settings:
    return Settings(
        state_dir=state_dir,
        cache_dir=tmp_path / "cache",
        proxy_listen="127.0.0.1:0",
        local_warm_sandboxes=2,
    )


@pytest.fixture
async def backend(settings: Settings) -> AsyncIterator[LocalBackend]:
    local = LocalBackend(settings)
    await local.warm_up(NetworkPolicy.FULL)  # made before any route exists
    yield local
    await local.close()


async def sandbox_for(backend: LocalBackend, rollout_id: str) -> LocalSandbox:
    spec = SandboxSpec(network=NetworkPolicy.FULL)
    return await backend.create(SandboxRequest(rollout_id, spec, lifetime_s=300))


def rollout_spec(upstream: FakeUpstream) -> RolloutSpec:
    return RolloutSpec(
        task=TaskSpec(instruction="hi"),
        endpoint=EndpointSpec(base_url=upstream.base_url, api_key=UPSTREAM_KEY, model="m"),
        sandbox=SandboxSpec(backend="local", network=NetworkPolicy.FULL),
    )


async def test_a_route_answers_only_its_own_sandbox(
    settings: Settings,
    proxy: CaptureProxy,
    backend: LocalBackend,
    upstream: FakeUpstream,
    agent: httpx.AsyncClient,
) -> None:
    upstream.script(Reply(text="for the victim"))
    victim = await sandbox_for(backend, "victim")
    attacker = await sandbox_for(backend, "attacker")
    assert victim.name == "victim"
    router = ModelRouter(proxy, {}, settings)
    spec = rollout_spec(upstream)
    attach = router.attacher("victim", spec, router.resolve(spec, required=True))
    assert attach is not None
    turns: list[Turn] = []
    async with attach(victim, turns.append) as attachment:
        access = attachment.access
        # Everything the victim's agent knows, tried on the shared TCP listener (a network
        # FULL sandbox in the host's namespace reaches it): no route there.
        path = urlsplit(access.base_url).path
        response = await agent.post(
            f"{proxy.url}{path}/chat/completions",
            json=chat("injected"),
            headers={"Authorization": f"Bearer {access.api_key}"},
        )
        assert response.status_code == 404
        # Another sandbox sees no socket of the victim's, nor its own without a route.
        seen = await attacker.exec(
            f"ls -A {PROXY_DIR}; ls {victim.proxy_socket_path}", timeout_s=30
        )
        assert seen.stdout == ""
        assert victim.proxy_socket_path.is_socket()
        # The victim's own agent reaches its route through its socket.
        env = {"BASE_URL": access.base_url, "API_KEY": access.api_key}
        command = CALL.replace("MARK", "from the victim")  # the attachment's forwarder
        own = await victim.exec(f"bash -c {shlex.quote(command)}", timeout_s=60, env=env)
        assert own.stdout.strip() == "200", own.stderr
    assert [t.request_messages for t in turns] == [[{"role": "user", "content": "from the victim"}]]
    assert not victim.proxy_socket_path.exists()  # the route closed with the attachment
    await victim.kill()
    await attacker.kill()


async def open_socket_route(proxy: CaptureProxy, upstream: FakeUpstream, path: Path) -> Route:
    endpoint = ResolvedEndpoint(upstream.base_url, UPSTREAM_KEY, UPSTREAM_MODEL)
    return await proxy.open_sandbox_route("r", endpoint, CaptureSpec(), lambda turn: None, path)


@pytest.fixture(params=[60.0])
async def small_proxy(
    state_dir: Path, request: pytest.FixtureRequest
) -> AsyncIterator[CaptureProxy]:
    """A proxy admitting 8 connections per listener, idle ones closed after `param` s."""
    settings = Settings(
        state_dir=state_dir,
        proxy_listen="127.0.0.1:0",
        proxy_max_connections_per_sandbox=8,
        proxy_max_tcp_connections=8,
        proxy_idle_timeout_s=request.param,
    )
    proxy = CaptureProxy(settings)
    await proxy.start()
    yield proxy
    await proxy.stop()


async def connect_many(path: Path, count: int) -> list[socket.socket]:
    """`count` connections held open (connected without blocking the proxy's loop)."""
    loop = asyncio.get_running_loop()
    held = []
    for _ in range(count):
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.setblocking(False)
        await loop.sock_connect(client, str(path))
        held.append(client)
    return held


async def test_a_sandbox_holds_no_more_than_its_connection_limit(
    small_proxy: CaptureProxy, upstream: FakeUpstream, state_dir: Path
) -> None:
    path = state_dir / "sb" / "proxy.sock"
    route = await open_socket_route(small_proxy, upstream, path)
    limit = small_proxy.socket_connections(route)
    assert limit is not None
    held = await connect_many(path, 200)
    await eventually(lambda: limit.refused > 150)  # the rest may still wait in the backlog
    assert len(limit) == 8
    for connection in held:
        connection.close()
    await eventually(lambda: len(limit) == 0)
    async with httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=str(path))) as client:
        response = await client.post("http://sandbox/v1/chat/completions", json=chat("hi"))
    assert response.status_code == 200  # a well-behaved client is served again


@pytest.mark.parametrize("small_proxy", [0.3], indirect=True)
@pytest.mark.parametrize("partial", [b"", b"POST /v1/chat/completions HTTP/1.1\r\nHost: x"])
async def test_idle_and_slow_header_connections_are_closed(
    small_proxy: CaptureProxy, upstream: FakeUpstream, state_dir: Path, partial: bytes
) -> None:
    path = state_dir / "sb" / "proxy.sock"
    await open_socket_route(small_proxy, upstream, path)
    reader, writer = await asyncio.open_unix_connection(str(path))
    writer.write(partial)
    async with asyncio.timeout(30):
        assert await reader.read() == b""  # closed by the proxy, not by us
    writer.close()


async def test_the_tcp_listener_holds_no_more_than_its_limit(small_proxy: CaptureProxy) -> None:
    loop = asyncio.get_running_loop()
    held = []
    for _ in range(40):
        client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        client.setblocking(False)
        await loop.sock_connect(client, (small_proxy.host, small_proxy.port))
        held.append(client)
    limit = small_proxy.tcp_connections
    await eventually(lambda: limit.refused > 20)
    assert len(limit) == 8
    for client in held:
        client.close()
