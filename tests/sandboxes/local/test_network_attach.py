"""Network FULL opened on a live sandbox made under NONE (a verifier's, `network_attach`).

Checked against the same test host as network FULL at creation (`test_network`): once
opened, the sandbox reaches it and still never the host's loopback, its own addresses or
a private address; pasta ends with the sandbox.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from service.errors import SpecError
from service.models import NetworkPolicy, SandboxSpec
from service.sandboxes.internet import InternetAccess
from service.sandboxes.local.backend import LocalBackend
from service.sandboxes.local.network import DNS_ADDRESS, host_addresses
from tests.sandboxes.conftest import MakeSandbox
from tests.sandboxes.local.test_network import (  # the test host and the probe
    Greeter,
    _connects,
    _listener,
    greeter,  # noqa: F401 - a fixture
)


def _pastas_of(log: Path) -> list[int]:
    """Pids of the processes whose command line names `log` (a sandbox's pasta)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if entry.name.isdigit() and str(log).encode() in argv:
            found.append(int(entry.name))
    return found


async def _exited(pidfd: int) -> None:
    """Returns once the process behind `pidfd` has exited (no deadline but the test's)."""
    loop = asyncio.get_running_loop()
    gone: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        if not gone.done():
            gone.set_result(None)

    loop.add_reader(pidfd, readable)
    try:
        await gone
    finally:
        loop.remove_reader(pidfd)
        os.close(pidfd)


async def test_a_none_sandbox_opened_reaches_a_public_host_and_never_the_host(
    make_local_sandbox: MakeSandbox,
    greeter: Greeter,  # noqa: F811 - the fixture imported above
) -> None:
    sandbox = await make_local_sandbox(network=NetworkPolicy.NONE)
    assert isinstance(sandbox, InternetAccess)
    reached, said = await _connects(sandbox, greeter.address, greeter.port)
    assert not reached, said
    await sandbox.open_internet()
    await sandbox.open_internet()  # idempotent: one pasta
    pastas = _pastas_of(sandbox.layout.network_log)
    assert len(pastas) == 1
    pasta = os.pidfd_open(pastas[0])
    reached, said = await _connects(sandbox, greeter.address, greeter.port)
    assert reached, said
    assert "hello from the test host" in said
    resolver = await sandbox.exec("cat /etc/resolv.conf", timeout_s=30)
    assert resolver.stdout == f"nameserver {DNS_ADDRESS}\n"
    own = [p.split("/")[0] for p in host_addresses(Path("/proc/net/fib_trie").read_text())]
    targets = ["127.0.0.1", "0.0.0.0", greeter.host.private_address, *own]
    server, port, accepted = await _listener("0.0.0.0")  # every host address, 10.x included
    async with server:
        for address in targets:
            reached, said = await _connects(sandbox, address, port)
            assert not reached, (address, said)
    assert accepted == []
    await sandbox.kill()
    await _exited(pasta)  # it ended with the sandbox


async def test_pasta_of_an_opened_sandbox_ends_when_its_init_does(
    make_local_sandbox: MakeSandbox,
) -> None:
    """Even without the server's teardown: the attaching program watches init."""
    sandbox = await make_local_sandbox(network=NetworkPolicy.NONE)
    await sandbox.open_internet()
    (pasta,) = map(os.pidfd_open, _pastas_of(sandbox.layout.network_log))
    assert sandbox._holder is not None
    await sandbox._holder.kill()  # the namespaces die; nothing told the attaching program
    await _exited(pasta)
    await sandbox.kill()


async def test_a_verifier_under_full_without_pasta_is_refused_before_the_agent_runs(
    local_backend: LocalBackend, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no pasta, no ip
    spec = SandboxSpec(verifier_network=NetworkPolicy.FULL)
    with pytest.raises(SpecError) as error:
        await local_backend.check_spec(spec)
    (violation,) = error.value.violations
    assert violation.field == "spec.sandbox.verifier_network"
    assert "apt-get install passt iproute2" in violation.description
    monkeypatch.undo()
    await local_backend.check_spec(spec)  # pasta is installed here
