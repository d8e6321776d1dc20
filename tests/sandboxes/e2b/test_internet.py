"""An E2B sandbox made under network NONE opened for its verifier (`InternetAccess`), with
the real `e2b` SDK against the fake cloud: one network update allowing all egress, after
which commands reach what a NONE sandbox cannot (`test_backend`). The fake applies an
update to the sandbox's first command only, so none runs before it here."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from service.models import NetworkPolicy
from service.sandboxes.internet import InternetAccess
from testing.e2b_support import fake_cloud, make_backend, make_request
from testing.fakes.e2b_cloud import FakeE2B


@pytest.fixture
async def cloud(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeE2B]:
    async with fake_cloud(tmp_path, monkeypatch) as fake:
        yield fake


async def test_open_internet_allows_all_egress(cloud: FakeE2B, tmp_path: Path) -> None:
    backend = make_backend(tmp_path)
    try:
        sandbox = await backend.create(make_request(network=NetworkPolicy.NONE))
        assert isinstance(sandbox, InternetAccess)
        await sandbox.open_internet()
        assert cloud.network_updates == [(sandbox.id, {"allowOut": ["0.0.0.0/0"]})]
        with socket.create_server(("127.0.0.1", 0)) as listener:
            probe = f"exec 3<>/dev/tcp/127.0.0.1/{listener.getsockname()[1]} && echo reached"
            result = await sandbox.exec(probe, timeout_s=30)
        assert result.stdout == "reached\n", result.stderr
        await sandbox.kill()
    finally:
        await backend.close()
