"""Two servers on one PostgreSQL, each its own E2B instance: when the one running a rollout on
E2B is killed (-9), the other takes the rollout over once the lease expires and kills its
sandbox, found by the rollout's label, before it reports the rollout ended."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from tests.e2e.specs import command_spec
from tests.e2e.test_replicas import database_url as database_url  # the PostgreSQL fixture
from tests.fakes.e2b_cloud import FakeE2B
from tests.sandboxes.e2b.support import eventually, fake_cloud
from tests.sandboxes.e2b.test_rollout import _running
from tests.server_process import ServerProcess

pytestmark = pytest.mark.e2e


@pytest.fixture
async def cloud(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeE2B]:
    async with fake_cloud(tmp_path, monkeypatch) as fake:
        yield fake


async def test_the_replica_taking_over_kills_the_dead_replicas_e2b_sandbox(
    cloud: FakeE2B, tmp_path: Path, database_url: str
) -> None:
    env = cloud.environment() | {
        "ROLLOUT_DATABASE_URL": database_url,
        "ROLLOUT_DATABASE_LEASE_S": "2",
        "ROLLOUT_E2B_CREATES_PER_S": "0",
    }
    dying = ServerProcess(tmp_path / "a", env | {"ROLLOUT_INSTANCE_ID": "replica-a"})
    taking_over = ServerProcess(tmp_path / "b", env | {"ROLLOUT_INSTANCE_ID": "replica-b"})
    # The fake cloud shares this event loop: never block it on a server.
    await asyncio.to_thread(dying.start)
    await asyncio.to_thread(taking_over.start)
    try:
        async with (
            grpc.aio.insecure_channel(dying.target) as to_a,
            grpc.aio.insecure_channel(taking_over.target) as to_b,
        ):
            spec = command_spec("sleep 300", sandbox={"backend": "e2b", "template": "tmpl"})
            started = await pb_grpc.RolloutServiceStub(to_a).StartRollout(
                pb.StartRolloutRequest(spec=spec)
            )
            await eventually(lambda: _running(cloud, "sleep 300"), timeout_s=30)
            (sandbox_id,) = cloud.live_ids()
            on_b = pb_grpc.RolloutServiceStub(to_b).WatchRollout(
                pb.WatchRolloutRequest(rollout_id=started.rollout.id)
            )
            assert await asyncio.to_thread(dying.stop, signal.SIGKILL) == -signal.SIGKILL
            seen = [response.event async for response in on_b]
            left_when_ended = cloud.live_ids()
    finally:
        assert await asyncio.to_thread(taking_over.stop) == 0, taking_over.text()

    assert seen[-1].finished.status == pb.ROLLOUT_STATUS_FAILED
    assert seen[-1].finished.result.error.kind == pb.ERROR_KIND_INTERNAL
    assert sandbox_id not in left_when_ended
    assert cloud.records[sandbox_id].metadata["rollout-service-instance"] == "replica-a"
