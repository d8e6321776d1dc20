"""Two servers on one PostgreSQL, each its own E2B instance: when the one running a rollout on
E2B is killed (-9), the other takes the rollout over once the lease expires and kills its
sandbox, found by the rollout's label, before it reports the rollout ended; a group killed
mid-setup has its template sandbox killed the same way before it sets up again."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TypeAlias

import grpc
import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from service.sandboxes.e2b.backend import INSTANCE_LABEL
from testing.e2b_support import eventually, fake_cloud
from testing.fakes.e2b_cloud import FakeE2B
from testing.server_process import ServerProcess
from testing.specs import command_spec
from tests.e2e.group_support import group_spec, start_group
from tests.e2e.test_replicas import database_url as database_url  # the PostgreSQL fixture
from tests.sandboxes.e2b.test_rollout import _running

pytestmark = pytest.mark.e2e

Stub: TypeAlias = "pb_grpc.RolloutServiceAsyncStub"  # only in the stubs' .pyi
_E2B = {"backend": "e2b", "template": "tmpl"}


@pytest.fixture
async def cloud(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeE2B]:
    async with fake_cloud(tmp_path, monkeypatch) as fake:
        yield fake


@contextlib.asynccontextmanager
async def _two_replicas(
    cloud: FakeE2B, tmp_path: Path, database_url: str
) -> AsyncIterator[tuple[ServerProcess, Stub, Stub]]:
    """Replicas A (the one to kill: its server, its stub) and B (its stub), on their own E2B
    instances; B must exit 0."""
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
            yield dying, pb_grpc.RolloutServiceStub(to_a), pb_grpc.RolloutServiceStub(to_b)
    finally:
        await asyncio.to_thread(dying.stop)
        assert await asyncio.to_thread(taking_over.stop) == 0, taking_over.text()


def _instances(cloud: FakeE2B) -> dict[str, str]:
    """The live sandboxes' ids and the instances that created them."""
    return {sid: cloud.records[sid].metadata[INSTANCE_LABEL] for sid in cloud.live_ids()}


async def test_the_replica_taking_over_kills_the_dead_replicas_e2b_sandbox(
    cloud: FakeE2B, tmp_path: Path, database_url: str
) -> None:
    async with _two_replicas(cloud, tmp_path, database_url) as (dying, a, b):
        spec = command_spec("sleep 300", sandbox=_E2B)
        started = await a.StartRollout(pb.StartRolloutRequest(spec=spec))
        await eventually(lambda: _running(cloud, "sleep 300"), timeout_s=30)
        (sandbox_id,) = cloud.live_ids()
        on_b = b.WatchRollout(pb.WatchRolloutRequest(rollout_id=started.rollout.id))
        assert await asyncio.to_thread(dying.stop, signal.SIGKILL) == -signal.SIGKILL
        seen = [response.event async for response in on_b]
        left_when_ended = cloud.live_ids()

    assert seen[-1].finished.status == pb.ROLLOUT_STATUS_FAILED
    assert seen[-1].finished.result.error.kind == pb.ERROR_KIND_INTERNAL
    assert sandbox_id not in left_when_ended
    assert cloud.records[sandbox_id].metadata[INSTANCE_LABEL] == "replica-a"


async def test_a_group_taken_over_mid_setup_has_its_template_sandbox_killed(
    cloud: FakeE2B, tmp_path: Path, database_url: str
) -> None:
    async with _two_replicas(cloud, tmp_path, database_url) as (dying, a, b):
        spec = command_spec("true", setup=("sleep 301",), sandbox=_E2B)
        group = await start_group(a, group_spec(spec, 2))
        await eventually(lambda: _running(cloud, "sleep 301"), timeout_s=30)
        assert list(_instances(cloud).values()) == ["replica-a"]
        (template_id,) = cloud.live_ids()
        assert await asyncio.to_thread(dying.stop, signal.SIGKILL) == -signal.SIGKILL
        # B takes the group over and sets it up again in a template of its own.
        await eventually(lambda: "replica-b" in _instances(cloud).values(), timeout_s=30)
        after_takeover = _instances(cloud)
        cancelled = (await b.CancelGroup(pb.CancelGroupRequest(group_id=group.id))).group

    assert template_id not in after_takeover
    assert list(after_takeover.values()) == ["replica-b"]
    assert cancelled.status == pb.GROUP_STATUS_CANCELLED
    assert cloud.live_ids() == set()
