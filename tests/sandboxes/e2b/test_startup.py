"""Server start with the E2B backend configured (ROLLOUT_START_BACKENDS): it is loaded and its
orphans are swept before the server serves; an unreachable E2B does not keep it from serving;
the key alone loads nothing."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import grpc
import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.e2b_support import make_backend, make_request
from testing.fakes.e2b_cloud import FakeE2B
from testing.server_process import ServerProcess

pytestmark = pytest.mark.e2e

_E2B_AT_START = {"ROLLOUT_START_BACKENDS": '["e2b"]'}


async def _started(state_dir: Path, env: dict[str, str]) -> ServerProcess:
    """A server that answers RPCs (so it serves, and has its signal handlers)."""
    server = ServerProcess(state_dir, env=env)
    await asyncio.to_thread(server.start)  # the fake cloud shares this event loop
    async with grpc.aio.insecure_channel(server.target) as channel:
        stub = pb_grpc.RolloutServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await stub.GetRollout(pb.GetRolloutRequest(rollout_id="nope"))
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    return server


async def test_orphans_of_this_instance_are_killed_before_the_server_serves(
    cloud: FakeE2B, tmp_path: Path
) -> None:
    crashed = make_backend(tmp_path, instance_id="sweep-me")  # a run that died mid-rollout
    orphan = await crashed.create(make_request("lost-rollout"))
    theirs = await make_backend(tmp_path, instance_id="another").create(make_request("theirs"))
    assert cloud.live_ids() == {orphan.id, theirs.id}

    server = await _started(
        tmp_path / "state",
        cloud.environment() | {"ROLLOUT_INSTANCE_ID": "sweep-me"} | _E2B_AT_START,
    )
    try:
        assert cloud.live_ids() == {theirs.id}
        assert "killed 1 orphaned e2b sandboxes" in server.text()
    finally:
        assert await asyncio.to_thread(server.stop) == 0, server.text()


async def test_an_unreachable_e2b_is_logged_and_the_server_serves(tmp_path: Path) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    nowhere = f"http://127.0.0.1:{port}"
    env = {"E2B_API_KEY": "e2b_key", "E2B_API_URL": nowhere, "E2B_SANDBOX_URL": nowhere}
    server = await _started(tmp_path / "state", env | _E2B_AT_START)
    try:
        assert "could not sweep orphaned e2b sandboxes" in server.text()
    finally:
        assert await asyncio.to_thread(server.stop) == 0, server.text()


async def test_the_key_alone_does_not_load_the_backend(cloud: FakeE2B, tmp_path: Path) -> None:
    orphan = await make_backend(tmp_path, instance_id="keep-me").create(make_request("lost"))

    server = await _started(
        tmp_path / "state", cloud.environment() | {"ROLLOUT_INSTANCE_ID": "keep-me"}
    )
    try:
        assert cloud.live_ids() == {orphan.id}
        assert "orphaned e2b sandboxes" not in server.text()
    finally:
        assert await asyncio.to_thread(server.stop) == 0, server.text()
