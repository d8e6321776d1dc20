"""A server killed in the middle of a group: the next one keeps what finished, starts the
interrupted member again (or reports it, when its spec needed a key the store never holds),
and WatchGroup replays the whole group."""

from __future__ import annotations

import signal
import uuid
from pathlib import Path

import grpc
import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from service.engine.groups.members import member_seed
from testing.fakes.llm_upstream import FakeUpstream, Reply
from testing.server_process import ServerProcess
from testing.specs import command_spec
from tests.e2e.group_support import (
    call_model_then,
    group_spec,
    run_to_end,
    snapshots_left,
    start_group,
)
from tests.e2e.processes import eventually, processes_with

pytestmark = pytest.mark.e2e

GROUP_SEED = 99


async def _first_member_to_end(stub: pb_grpc.RolloutServiceAsyncStub, group_id: str) -> pb.Rollout:
    async for response in stub.WatchGroup(pb.WatchGroupRequest(group_id=group_id)):
        return response.member
    raise AssertionError("the group ended with no member")


async def _group_killed_mid_run(
    server: ServerProcess, upstream: FakeUpstream, *, api_key: str = ""
) -> tuple[pb.Group, pb.Rollout]:
    """Start a group of two (member 1 slow), kill the server once member 0 has finished
    and member 1 is running, and start the server again."""
    marker = f"5{uuid.uuid4().int % 10**6:06d}"
    slow = member_seed(GROUP_SEED, 1)
    # Member 1's first call only: it then sleeps until the server is killed (however loaded
    # the machine), and its refill, given the default reply, does not.
    upstream.script(Reply(text="slow"), match=lambda body: body.get("seed") == slow)
    spec = command_spec(
        call_model_then(f"grep -q slow reply.txt && sleep 600.{marker}; true"),
        setup=("echo prepared > prepared.txt",),
        verify=("test -s prepared.txt",),
        endpoint={"base_url": upstream.base_url, "model": "fake-model", "api_key": api_key},
        sampling={"seed": GROUP_SEED},
    )
    target = server.start()
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.RolloutServiceStub(channel)
        group = await start_group(stub, group_spec(spec, 2))
        finished = await _first_member_to_end(stub, group.id)
        # the test needs member 0 counted before the kill; an infrastructure failure here
        # (seen once under CI's load) would make it another test, so say what it was
        assert finished.status == pb.ROLLOUT_STATUS_SUCCEEDED, finished.result.error
        # the sleep itself, not a shell whose command line merely names it (every member's
        # does, before its model call): only then is member 1 past its call and running
        await eventually(lambda: _sleeping(marker), timeout_s=60)
    server.stop(signal.SIGKILL)
    server.start()
    return group, finished


def _sleeping(marker: str) -> bool:
    """Whether a `sleep 600.<marker>` process runs (its argv, not a shell's text)."""
    argv = [b"sleep", f"600.{marker}".encode()]
    for pid in processes_with(marker):
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:2] == argv:
                return True
        except OSError:
            continue
    return False


async def test_a_restart_keeps_finished_members_and_refills_the_interrupted(
    fresh_server: ServerProcess,
) -> None:
    async with FakeUpstream() as upstream:
        started, finished = await _group_killed_mid_run(fresh_server, upstream)
        async with grpc.aio.insecure_channel(fresh_server.target) as channel:
            stub = pb_grpc.RolloutServiceStub(channel)
            group = await run_to_end(stub, started.id)
            replayed = [r async for r in stub.WatchGroup(pb.WatchGroupRequest(group_id=started.id))]
    assert finished.member_index == 0
    assert group.status == pb.GROUP_STATUS_COMPLETED, group
    assert group.stats.counted == 2
    assert group.stats.refills == 1
    by_id = {m.rollout_id: m for m in group.members}
    assert by_id[finished.id].counted
    [interrupted] = [m for m in group.members if m.replaced_by]
    assert interrupted.index == 1
    assert interrupted.error_kind == pb.ERROR_KIND_INTERNAL
    assert by_id[interrupted.replaced_by].counted
    assert by_id[interrupted.replaced_by].seed == member_seed(GROUP_SEED, 1)
    assert [r.WhichOneof("event") for r in replayed] == ["member"] * 3 + ["group"]
    assert replayed[0].member.id == finished.id
    assert replayed[-1].group == group
    # The killed server's snapshot was swept at the start; the refill set up on its own.
    assert snapshots_left(fresh_server) == []


async def test_a_restart_reports_members_it_cannot_start_without_the_key(
    fresh_server: ServerProcess,
) -> None:
    async with FakeUpstream(api_key="sk-never-stored") as upstream:
        started, _ = await _group_killed_mid_run(fresh_server, upstream, api_key="sk-never-stored")
        async with grpc.aio.insecure_channel(fresh_server.target) as channel:
            group = await run_to_end(pb_grpc.RolloutServiceStub(channel), started.id)
    assert group.status == pb.GROUP_STATUS_FAILED, group
    assert group.stats.counted == 1
    assert len(group.members) == 2
    assert [m.error_kind for m in group.members if not m.counted] == [pb.ERROR_KIND_INTERNAL]
    assert "1 of 2 members counted" in group.error.message
