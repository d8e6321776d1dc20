"""Network FULL reaches the internet and never the host: checked against a test host.

The machine has no internet, so the "internet" is a host of the test's own: a network
namespace behind a veth pair, at a documentation address (198.51.100.0/24) routed from
the host. Traffic goes only to it and to loopback.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from service.config import Settings
from service.models import NetworkPolicy, SandboxSpec
from service.sandboxes.base import SandboxRequest
from service.sandboxes.local.backend import LocalBackend, LocalSandbox
from service.sandboxes.local.network import host_addresses
from testing.fakes.public_host import PublicHost, public_host
from tests.sandboxes.conftest import MakeSandbox


@dataclass(frozen=True)
class Greeter:
    """A server on the test host that says hello to whoever connects."""

    host: PublicHost
    port: int

    @property
    def address(self) -> str:
        return self.host.address


@pytest.fixture
async def greeter() -> AsyncIterator[Greeter]:
    async def greet(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"hello from the test host")
        await writer.drain()
        writer.close()

    with public_host() as host:
        server = await asyncio.start_server(greet, sock=host.listen())
        async with server:
            yield Greeter(host, server.sockets[0].getsockname()[1])


async def _connects(sandbox: LocalSandbox, address: str, port: int) -> tuple[bool, str]:
    """Whether a TCP connection from the sandbox succeeds, and what it read or why not."""
    probe = (
        "import socket, sys\n"
        "try:\n"
        f"    s = socket.create_connection(('{address}', {port}), timeout=5)\n"
        "    print('connected', s.recv(100).decode())\n"
        "except OSError as exc:\n"
        "    print('refused', exc)\n"
    )
    result = await sandbox.exec(f'python3 -c "{probe}"', timeout_s=30)
    return result.stdout.startswith("connected"), result.stdout + result.stderr


async def _listener(address: str) -> tuple[asyncio.Server, int, list[object]]:
    accepted: list[object] = []

    def on_connect(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer.get_extra_info("peername"))
        writer.close()

    server = await asyncio.start_server(on_connect, address, 0)
    return server, server.sockets[0].getsockname()[1], accepted


async def test_full_reaches_a_public_host_but_no_host_or_private_address(
    make_local_sandbox: MakeSandbox, greeter: Greeter
) -> None:
    sandbox = await make_local_sandbox(network=NetworkPolicy.FULL)
    reached, said = await _connects(sandbox, greeter.address, greeter.port)
    assert reached, said
    assert "hello from the test host" in said
    own = [p.split("/")[0] for p in host_addresses(Path("/proc/net/fib_trie").read_text())]
    targets = ["127.0.0.1", "0.0.0.0", greeter.host.private_address, *own]
    server, port, accepted = await _listener("0.0.0.0")  # every host address, 10.x included
    async with server:
        for address in targets:
            reached, said = await _connects(sandbox, address, port)
            assert not reached, (address, said)
    assert accepted == []
    await sandbox.kill()


async def test_full_cannot_reach_the_host_through_pastas_gateway(
    make_local_sandbox: MakeSandbox,
) -> None:
    server, port, accepted = await _listener("127.0.0.1")
    async with server:
        sandbox = await make_local_sandbox(network=NetworkPolicy.FULL)
        route = await sandbox.exec("ip route show default", timeout_s=30)
        gateway = route.stdout.split()[2]
        reached, said = await _connects(sandbox, gateway, port)
        loopback, _ = await _connects(sandbox, "127.0.0.1", port)
    assert not reached, said
    assert not loopback
    assert accepted == []
    await sandbox.kill()


async def test_none_reaches_nothing(make_local_sandbox: MakeSandbox, greeter: Greeter) -> None:
    sandbox = await make_local_sandbox(network=NetworkPolicy.NONE)
    reached, said = await _connects(sandbox, greeter.address, greeter.port)
    assert not reached, said
    await sandbox.kill()


async def test_two_full_sandboxes_listen_on_the_same_loopback_port(
    make_local_sandbox: MakeSandbox,
) -> None:
    """Each has a loopback of its own: the proxy forwarder's port is never shared."""
    listen = "import socket; s = socket.create_server(('127.0.0.1', 48080)); print('ok')"
    hold = f"{listen}; import sys, time; sys.stdout.flush(); time.sleep(60)"
    first = await make_local_sandbox("full-1", network=NetworkPolicy.FULL)
    second = await make_local_sandbox("full-2", network=NetworkPolicy.FULL)
    held = await first.exec(
        f'(python3 -c "{hold}" > /tmp/bound &); '
        "until [ -s /tmp/bound ]; do sleep 0.05; done; cat /tmp/bound",
        timeout_s=30,
    )
    assert held.stdout == "ok\n", held.stderr
    result = await second.exec(f'python3 -c "{listen}"', timeout_s=30)
    assert result.stdout == "ok\n", result.stderr
    await first.kill()
    await second.kill()


@pytest.fixture
async def warm_full_backend(local_settings: Settings) -> AsyncIterator[LocalBackend]:
    backend = LocalBackend(local_settings.model_copy(update={"local_warm_sandboxes": 1}))
    await backend.warm_up(NetworkPolicy.FULL)
    yield backend
    await backend.close()


async def test_a_warm_full_sandbox_reaches_the_test_host(
    warm_full_backend: LocalBackend, local_settings: Settings, greeter: Greeter
) -> None:
    [warm] = [p.name for p in (local_settings.state_dir / "sandboxes").iterdir()]
    assert warm.startswith("warm-")
    spec = SandboxSpec(network=NetworkPolicy.FULL)
    sandbox = await warm_full_backend.create(SandboxRequest("r-warm", spec, 300))
    assert not (local_settings.state_dir / "sandboxes" / warm).exists()  # it was claimed
    reached, said = await _connects(sandbox, greeter.address, greeter.port)
    assert reached, said
    server, port, accepted = await _listener("127.0.0.1")
    async with server:
        loopback, said = await _connects(sandbox, "127.0.0.1", port)
    assert not loopback, said
    assert accepted == []
    await sandbox.kill()
