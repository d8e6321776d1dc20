"""A group on the e2b backend (the fake E2B cloud): setup runs once, in a template sandbox
E2B snapshots (`create_snapshot`); every member, and every member's FRESH verifier, is
created from the snapshot; the group completes, and neither a sandbox nor the snapshot is
left."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.fakes.e2b_cloud import FakeE2B
from testing.server_process import ServerProcess
from testing.specs import command_spec

pytestmark = pytest.mark.e2e


@pytest.fixture
async def stub(cloud: FakeE2B, tmp_path: Path) -> AsyncIterator[pb_grpc.RolloutServiceAsyncStub]:
    env = cloud.environment() | {"ROLLOUT_E2B_CREATES_PER_S": "0"}
    server = ServerProcess(tmp_path / "state", env=env)
    await asyncio.to_thread(server.start)  # the fake cloud shares this event loop
    async with grpc.aio.insecure_channel(server.target) as channel:
        yield pb_grpc.RolloutServiceStub(channel)
    assert await asyncio.to_thread(server.stop) == 0, server.text()


async def test_a_group_on_e2b_sets_up_once_from_a_snapshot_and_leaves_nothing(
    stub: pb_grpc.RolloutServiceAsyncStub, cloud: FakeE2B
) -> None:
    spec = command_spec(
        "cat made.txt > out.txt; echo $RANDOM$$ >> made.txt; cp made.txt after.txt",
        setup=("head -c 8 /dev/urandom | od -An -tx1 > made.txt",),
        verify=("test -s out.txt",),
        sandbox={"backend": "e2b", "template": "tmpl"},
    )
    request = pb.RunGroupRequest(spec=pb.GroupSpec(spec=spec, n=3))
    group = (await stub.RunGroup(request)).group
    assert group.status == pb.GROUP_STATUS_COMPLETED, group
    assert group.template_setups == 1
    assert group.stats.reward_mean == 1.0
    files = []
    for member in group.members:
        rollout = (
            await stub.GetRollout(pb.GetRolloutRequest(rollout_id=member.rollout_id))
        ).rollout
        files.append(rollout.result.files)
    (prepared,) = {f["out.txt"] for f in files}  # one setup: every member has its random bytes
    assert len({f["after.txt"] for f in files}) == 3  # each member's writes are its own
    assert all(f["after.txt"].startswith(prepared) for f in files)
    [snapshot] = cloud.snapshots
    templates = [record.template for record in cloud.records.values()]
    # the template, then the members and their FRESH verifiers, all from the one snapshot
    assert sorted(templates) == sorted(["tmpl", *[snapshot] * 6])
    assert cloud.live_ids() == set()
    assert snapshot not in cloud.template_ids()  # deleted at the group's end


async def test_where_e2b_refuses_the_snapshot_each_member_sets_up_on_its_own(
    stub: pb_grpc.RolloutServiceAsyncStub, cloud: FakeE2B
) -> None:
    cloud.refuse_snapshots = True
    spec = command_spec(
        "cat made.txt > out.txt",
        setup=("head -c 8 /dev/urandom | od -An -tx1 > made.txt",),
        verify=("test -s out.txt",),
        sandbox={"backend": "e2b", "template": "tmpl"},
    )
    group = (await stub.RunGroup(pb.RunGroupRequest(spec=pb.GroupSpec(spec=spec, n=3)))).group
    assert group.status == pb.GROUP_STATUS_COMPLETED, group
    assert group.template_setups == 0
    assert group.stats.reward_mean == 1.0
    outputs = set()
    for member in group.members:
        rollout = (
            await stub.GetRollout(pb.GetRolloutRequest(rollout_id=member.rollout_id))
        ).rollout
        outputs.add(rollout.result.files["out.txt"])
    assert len(outputs) == 3  # each member's own setup: three random values
    assert [record.template for record in cloud.records.values()] == ["tmpl"] * 4
    assert cloud.live_ids() == set()
