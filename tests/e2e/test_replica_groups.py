"""Three servers on one PostgreSQL: a group and a label-wide watch across replicas.

WatchGroup on a replica that does not run the group is live (a member that ends reaches it
while the group runs) and CancelGroup there ends the group on its owner; a label-wide
WatchRollout on one replica sees the rollouts the others run; a replica killed mid-group has
its group resumed by another once its lease expires, its members ended as interrupted and
started again there, and nothing of it left running.

The members' agents sleep until cancelled, so that what a watcher receives is provably live.
"""

from __future__ import annotations

import asyncio
import signal
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import TypeAlias

import grpc
import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.specs import command_spec
from tests.e2e.group_support import group_spec, start_group
from tests.e2e.test_replicas import Replicas, _processes_with, three_replicas
from tests.e2e.test_replicas import database_url as database_url  # the PostgreSQL fixture

pytestmark = pytest.mark.e2e

Stub: TypeAlias = "pb_grpc.RolloutServiceAsyncStub"  # only in the stubs' .pyi
Stubs = tuple[Stub, Stub, Stub]


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory, database_url: str) -> Iterator[Replicas]:
    """A 5 s lease: a margin for heartbeats a loaded machine delays."""
    yield from three_replicas(tmp_path_factory, database_url, lease_s=5)


@pytest.fixture
async def stubs(replicas: Replicas) -> AsyncIterator[Stubs]:
    a, b, c = replicas
    async with (
        grpc.aio.insecure_channel(a.target) as to_a,
        grpc.aio.insecure_channel(b.target) as to_b,
        grpc.aio.insecure_channel(c.target) as to_c,
    ):
        yield (
            pb_grpc.RolloutServiceStub(to_a),
            pb_grpc.RolloutServiceStub(to_b),
            pb_grpc.RolloutServiceStub(to_c),
        )


def _sleeping_members(marker: str) -> pb.GroupSpec:
    """Two members whose agents sleep until cancelled (`marker` finds them in /proc)."""
    return group_spec(command_spec(f"echo member-ready; exec sleep {marker}"), 2)


async def _members_of(stub: pb_grpc.RolloutServiceAsyncStub, group_id: str, n: int) -> pb.Group:
    """The group once `n` of its members have started."""
    while True:
        group = (await stub.GetGroup(pb.GetGroupRequest(group_id=group_id))).group
        if len(group.members) >= n:
            return group
        await asyncio.sleep(0.1)


async def _agents_sleeping(marker: str, n: int) -> None:
    """Wait until `n` processes sleep for `marker` seconds (the members' agents)."""
    while True:
        if len(_processes_with(f"sleep {marker}")) >= n:
            return
        await asyncio.sleep(0.1)


async def test_watch_group_on_another_replica_is_live_and_cancel_group_there_ends_it(
    stubs: Stubs,
) -> None:
    a, b, c = stubs
    marker = "621.5"
    group = await start_group(a, _sleeping_members(marker))
    on_b = b.WatchGroup(pb.WatchGroupRequest(group_id=group.id))
    running = await _members_of(a, group.id, 2)
    first = running.members[0].rollout_id
    await c.CancelRollout(pb.CancelRolloutRequest(rollout_id=first, reason="one member less"))

    # The member's end reaches B while A still runs the group (its other member sleeps).
    seen = [await anext(aiter(on_b))]
    assert seen[0].member.id == first
    assert seen[0].member.status == pb.ROLLOUT_STATUS_CANCELLED
    still = await b.GetGroup(pb.GetGroupRequest(group_id=group.id))
    assert still.group.status == pb.GROUP_STATUS_RUNNING

    request = pb.CancelGroupRequest(group_id=group.id, reason="asked on b")
    cancelled = (await b.CancelGroup(request)).group
    seen += [response async for response in on_b]

    assert cancelled.status == pb.GROUP_STATUS_CANCELLED
    assert cancelled.error.message == "cancelled: asked on b"
    assert seen[-1].group.status == pb.GROUP_STATUS_CANCELLED
    members = [entry.member for entry in seen[:-1]]
    assert sorted(member.id for member in members) == sorted(
        member.rollout_id for member in running.members
    )
    assert all(member.status == pb.ROLLOUT_STATUS_CANCELLED for member in members)
    on_a = await a.GetGroup(pb.GetGroupRequest(group_id=group.id))
    assert on_a.group.status == pb.GROUP_STATUS_CANCELLED
    assert not _processes_with(f"sleep {marker}")


async def test_a_label_wide_watch_sees_the_rollouts_of_every_replica(stubs: Stubs) -> None:
    a, b, c = stubs
    labels = {"fleet": uuid.uuid4().hex}
    ticking = command_spec("while :; do echo tick; sleep 0.2; done", labels=labels)
    watch = b.WatchRollout(pb.WatchRolloutRequest(labels=labels))
    events = aiter(watch)
    on_a = (await a.StartRollout(pb.StartRolloutRequest(spec=ticking))).rollout.id
    on_c = (await c.StartRollout(pb.StartRolloutRequest(spec=ticking))).rollout.id
    seen: dict[str, list[pb.RolloutEvent]] = {on_a: [], on_c: []}
    # Their agents tick until cancelled: a tick of each on B is live, whenever B's watch began.
    while not all(any(e.output.text for e in events_of) for events_of in seen.values()):
        event = (await anext(events)).event
        seen.setdefault(event.rollout_id, []).append(event)
    other = await a.RunRollout(pb.RunRolloutRequest(spec=command_spec(labels={"fleet": "other"})))
    for rollout_id in (on_a, on_c):
        await b.CancelRollout(pb.CancelRolloutRequest(rollout_id=rollout_id, reason="seen"))
    while not all(events_of[-1].HasField("finished") for events_of in seen.values()):
        event = (await anext(events)).event
        seen.setdefault(event.rollout_id, []).append(event)
    watch.cancel()

    assert sorted(seen) == sorted([on_a, on_c]), f"{other.rollout.id} does not carry the labels"
    for events_of in seen.values():
        seqs = [event.seq for event in events_of]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
        assert events_of[-1].finished.status == pb.ROLLOUT_STATUS_CANCELLED
        assert events_of[-1].finished.result.error.message == "cancelled: seen"


async def test_a_replica_killed_mid_group_has_its_group_resumed_by_another(
    replicas: Replicas, stubs: Stubs
) -> None:
    *_, server_c = replicas
    a, b, c = stubs
    marker = "622.25"
    group = await start_group(c, _sleeping_members(marker))
    started = await _members_of(c, group.id, 2)
    on_b = b.WatchGroup(pb.WatchGroupRequest(group_id=group.id))
    await _agents_sleeping(marker, 2)

    assert server_c.stop(signal.SIGKILL) == -signal.SIGKILL
    # Once C's lease expires, A or B ends its members as interrupted and resumes the group.
    interrupted = [(await anext(aiter(on_b))).member for _ in range(2)]
    resumed = await _members_of(a, group.id, 4)
    await _agents_sleeping(marker, 2)
    still = await a.GetGroup(pb.GetGroupRequest(group_id=group.id))
    cancelled = (await a.CancelGroup(pb.CancelGroupRequest(group_id=group.id))).group
    rest = [response async for response in on_b]
    server_c.start()  # the module's teardown stops it

    assert sorted(member.id for member in interrupted) == sorted(
        member.rollout_id for member in started.members
    )
    assert all(member.status == pb.ROLLOUT_STATUS_FAILED for member in interrupted)
    assert all(member.result.error.kind == pb.ERROR_KIND_INTERNAL for member in interrupted)
    replacements = {member.replaced_by for member in resumed.members[:2]}
    assert replacements == {member.rollout_id for member in resumed.members[2:]}
    assert still.group.status == pb.GROUP_STATUS_RUNNING
    assert cancelled.status == pb.GROUP_STATUS_CANCELLED
    assert rest[-1].group.status == pb.GROUP_STATUS_CANCELLED
    assert sorted(entry.member.id for entry in rest[:-1]) == sorted(replacements)
    assert not _processes_with(f"sleep {marker}")
