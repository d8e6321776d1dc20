"""Fixtures shared by every test package: a real server and gRPC stubs on loopback."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.server_process import ServerProcess, forget_inherited_settings, running

# A developer's ROLLOUT_LISTEN (or any ROLLOUT_* setting) must not change what the suite tests.
forget_inherited_settings()
# The suite tests the host-root sandbox's boundaries unless a test names an image
# (tests/sandboxes/local/test_image*.py, tests/e2e/test_image_rollouts.py); those use the
# server's shared cache, where the Debian base is built once per machine.
os.environ["ROLLOUT_SANDBOX_IMAGE"] = "host"


@pytest.fixture(scope="session")
def server_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server for the whole session (local bwrap sandboxes, SQLite in a temp dir)."""
    server = ServerProcess(
        tmp_path_factory.mktemp("server-state"),
        env={"ROLLOUT_MAX_RUNNING": "8", "ROLLOUT_SECRET_CANARY": "canary-7d1f"},
    )
    with running(server):
        yield server


@pytest.fixture(scope="session")
def server_target(server_process: ServerProcess) -> str:
    """host:port of the session's real server."""
    return server_process.target


@pytest.fixture
async def stub(server_target: str) -> AsyncIterator[pb_grpc.RolloutServiceAsyncStub]:
    """An asyncio stub connected to the session's server."""
    async with grpc.aio.insecure_channel(server_target) as channel:
        yield pb_grpc.RolloutServiceStub(channel)


@pytest.fixture
def fresh_server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A server of the test's own (for restart, capacity and shutdown tests); start it yourself."""
    server = ServerProcess(tmp_path / "state")
    yield server
    server.stop()
