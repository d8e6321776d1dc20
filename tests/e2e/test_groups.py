"""Groups through the real server: statistics, refills after a sandbox fault, stopping early,
per-member seeds at the upstream, cancel, admission and bad input.

The restart test lives in `test_groups_restart`.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator

import grpc
import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from service.engine.groups.members import member_seed
from testing.fakes.llm_upstream import FakeUpstream, Reply
from testing.server_process import ServerProcess, running
from testing.specs import command_spec
from tests.e2e.bad_request import violated_fields
from tests.e2e.group_support import (
    call_model_then,
    group_spec,
    run_to_end,
    snapshots_left,
    start_group,
)
from tests.e2e.processes import eventually, kill_sandbox_holder, processes_with

pytestmark = pytest.mark.e2e

GROUP_LABEL = "rollout.group"


@pytest.fixture(scope="module")
def group_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = ServerProcess(
        tmp_path_factory.mktemp("group-state"),
        # No warm sandboxes: a sandbox's directory (in its holder's argv) is then its rollout's.
        env={
            "ROLLOUT_MAX_RUNNING": "8",
            "ROLLOUT_MAX_QUEUED": "8",
            "ROLLOUT_LOCAL_WARM_SANDBOXES": "0",
        },
    )
    with running(server):
        yield server


@pytest.fixture
async def group_stub(group_server: ServerProcess) -> AsyncIterator[pb_grpc.RolloutServiceAsyncStub]:
    async with grpc.aio.insecure_channel(group_server.target) as channel:
        yield pb_grpc.RolloutServiceStub(channel)


async def test_a_group_reports_members_and_statistics_and_watch_replays(
    group_stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    spec = command_spec("echo sampled", verify=("true",), labels={"suite": "groups"})
    group = (await group_stub.RunGroup(pb.RunGroupRequest(spec=group_spec(spec, 3)))).group
    assert group.status == pb.GROUP_STATUS_COMPLETED
    assert [m.counted for m in group.members] == [True] * 3
    assert sorted(m.index for m in group.members) == [0, 1, 2]
    assert group.stats.counted == 3
    assert group.stats.rewarded == 3
    assert group.stats.reward_mean == 1.0
    assert group.stats.reward_stddev == 0.0
    assert [(c.status, c.count) for c in group.stats.statuses] == [(pb.ROLLOUT_STATUS_SUCCEEDED, 3)]
    member = (
        await group_stub.GetRollout(pb.GetRolloutRequest(rollout_id=group.members[1].rollout_id))
    ).rollout
    assert member.group_id == group.id
    assert member.member_index == group.members[1].index
    assert member.spec.labels == {"suite": "groups", GROUP_LABEL: group.id}
    replayed = [r async for r in group_stub.WatchGroup(pb.WatchGroupRequest(group_id=group.id))]
    assert [r.WhichOneof("event") for r in replayed] == ["member"] * 3 + ["group"]
    assert {r.member.id for r in replayed[:3]} == {m.rollout_id for m in group.members}
    assert replayed[-1].group == group


async def test_setup_runs_once_and_every_member_starts_from_its_filesystem(
    group_stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    spec = command_spec(
        "cat prepared.txt ~/.cache/made-by-setup > seen.txt && echo mine > own.txt",
        setup=(
            "head -c 16 /dev/urandom | od -An -tx1 > prepared.txt",
            "mkdir -p ~/.cache",
            "echo home-too > ~/.cache/made-by-setup",
        ),
        verify=("test -s seen.txt",),
        task={"files": {"given.txt": "c3RhZ2VkCg=="}},
    )
    group = (await group_stub.RunGroup(pb.RunGroupRequest(spec=group_spec(spec, 4)))).group
    assert group.status == pb.GROUP_STATUS_COMPLETED, group
    assert group.template_setups == 1
    members = [
        (await group_stub.GetRollout(pb.GetRolloutRequest(rollout_id=m.rollout_id))).rollout
        for m in group.members
    ]
    prepared = {m.result.files["prepared.txt"] for m in members}
    assert len(prepared) == 1  # one setup run: every member has its random bytes
    assert {m.result.files["seen.txt"] for m in members} == {prepared.pop() + b"home-too\n"}
    assert {m.result.files["given.txt"] for m in members} == {b"staged\n"}
    assert all(len(m.result.setup_results) == 3 for m in members)


async def test_a_failing_setup_fails_the_group_once_and_starts_no_member(
    group_stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    spec = command_spec("true", setup=("echo preparing", "echo broken >&2; exit 3"))
    group = (await group_stub.RunGroup(pb.RunGroupRequest(spec=group_spec(spec, 4)))).group
    assert group.status == pb.GROUP_STATUS_FAILED
    assert group.error.kind == pb.ERROR_KIND_SETUP
    assert "setup[1] failed (exit 3)" in group.error.message
    assert "broken" in group.error.message
    assert list(group.members) == []
    listed = await group_stub.ListRollouts(pb.ListRolloutsRequest(labels={GROUP_LABEL: group.id}))
    assert list(listed.rollouts) == []


async def test_a_member_whose_sandbox_dies_is_refilled_and_not_scored(
    group_stub: pb_grpc.RolloutServiceAsyncStub, group_server: ServerProcess
) -> None:
    # A setup makes the members forks of a template, never warm sandboxes renamed to them,
    # so the holder found by the member's sandbox directory is surely the victim's own. The
    # agent's sleep is the window for the kill: the verifier runs in a sandbox of its own,
    # so a kill that lands after the agent ended fails nothing (3 s was too short under load).
    spec = command_spec("sleep 8", setup=("true",), verify=("true",))
    group = await start_group(group_stub, group_spec(spec, 8))
    victim = await _member_in_agent_phase(group_stub, group.id)
    kill_sandbox_holder(group_server.state_dir, victim.result.sandbox_id)
    group = await run_to_end(group_stub, group.id)
    assert group.status == pb.GROUP_STATUS_COMPLETED, group
    assert group.stats.counted == 8
    assert group.stats.refills == 1
    assert group.stats.reward_mean == 1.0
    [dead] = [m for m in group.members if m.rollout_id == victim.id]
    assert dead.error_kind == pb.ERROR_KIND_SANDBOX, group
    assert not dead.counted
    assert dead.replaced_by
    [refill] = [m for m in group.members if m.rollout_id == dead.replaced_by]
    assert refill.counted
    assert refill.index == dead.index
    assert len(group.members) == 9


async def test_min_complete_cancels_the_stragglers_and_leaves_no_process(
    group_stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    marker = f"6{uuid.uuid4().int % 10**6:06d}"  # the stragglers' sleep, found in /proc
    group_seed = 1234
    slow = {member_seed(group_seed, index) for index in (2, 3)}
    async with FakeUpstream() as upstream:
        upstream.script(*[Reply(text="slow")] * 8, match=lambda body: body.get("seed") in slow)
        # The fast members linger a second, so the stragglers are surely in their agent phase.
        spec = command_spec(
            call_model_then(f"grep -q slow reply.txt && sleep {marker}; sleep 1"),
            verify=("true",),
            endpoint={"base_url": upstream.base_url, "model": "fake-model"},
            sampling={"seed": str(group_seed), "temperature": 0.25, "top_p": 0.5},
        )
        group = await start_group(group_stub, group_spec(spec, 4, min_complete=2))
        group = await run_to_end(group_stub, group.id)
        received = [request.body for request in upstream.requests if request.body]
    assert group.status == pb.GROUP_STATUS_COMPLETED, group
    assert group.stats.counted == 2
    statuses = {m.index: (m.status, m.counted) for m in group.members}
    assert statuses[0] == statuses[1] == (pb.ROLLOUT_STATUS_SUCCEEDED, True)
    assert statuses[2] == statuses[3] == (pb.ROLLOUT_STATUS_CANCELLED, False)
    assert {m.index: m.seed for m in group.members} == {
        i: member_seed(group_seed, i) for i in range(4)
    }
    assert sorted(body["seed"] for body in received) == sorted(
        member_seed(group_seed, i) for i in range(4)
    )
    assert {(body["temperature"], body["top_p"]) for body in received} == {(0.25, 0.5)}
    for straggler in (m for m in group.members if m.index in (2, 3)):
        assert pb.PHASE_AGENT in await _phases(group_stub, straggler.rollout_id)
    assert processes_with(marker) == []


async def test_cancel_group_mid_run_leaves_nothing(
    group_stub: pb_grpc.RolloutServiceAsyncStub, group_server: ServerProcess
) -> None:
    marker = f"7{uuid.uuid4().int % 10**6:06d}"
    spec = command_spec(f"sleep {marker}", setup=("echo prepared > prepared.txt",))
    group = await start_group(group_stub, group_spec(spec, 3))
    await eventually(lambda: len(processes_with(marker)) >= 3, timeout_s=60)
    cancelled = (
        await group_stub.CancelGroup(pb.CancelGroupRequest(group_id=group.id, reason="enough"))
    ).group
    assert cancelled.status == pb.GROUP_STATUS_CANCELLED
    assert "enough" in cancelled.error.message
    assert {m.status for m in cancelled.members} == {pb.ROLLOUT_STATUS_CANCELLED}
    assert cancelled.stats.counted == 0
    assert cancelled.template_setups == 1
    assert processes_with(marker) == []
    assert snapshots_left(group_server) == []  # the members' common layer went with them


async def test_the_deadline_times_the_group_out_and_leaves_nothing(
    group_stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    marker = f"8{uuid.uuid4().int % 10**6:06d}"
    spec = group_spec(command_spec(f"sleep {marker}"), 2)
    spec.deadline.FromSeconds(3)
    group = (await group_stub.RunGroup(pb.RunGroupRequest(spec=spec))).group
    assert group.status == pb.GROUP_STATUS_TIMED_OUT
    assert "deadline (3.0s) passed" in group.error.message
    assert {m.status for m in group.members} == {pb.ROLLOUT_STATUS_CANCELLED}
    for member in group.members:  # they were running their agent when the deadline came
        assert pb.PHASE_AGENT in await _phases(group_stub, member.rollout_id)
    assert processes_with(marker) == []


async def test_admission_counts_the_whole_group(fresh_server: ServerProcess) -> None:
    fresh_server.env |= {"ROLLOUT_MAX_RUNNING": "2", "ROLLOUT_MAX_QUEUED": "2"}
    target = fresh_server.start()
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.RolloutServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as too_big:
            await stub.StartGroup(pb.StartGroupRequest(spec=group_spec(command_spec(), 5)))
        assert too_big.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert violated_fields(too_big.value) == ["spec.n"]
        busy = await stub.StartRollout(pb.StartRolloutRequest(spec=command_spec("sleep 600")))
        with pytest.raises(grpc.aio.AioRpcError) as full:
            await stub.StartGroup(pb.StartGroupRequest(spec=group_spec(command_spec(), 4)))
        assert full.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "needs 4 slots and 3 are free" in (full.value.details() or "")
        spec = group_spec(command_spec(request_id=f"fits-{uuid.uuid4()}"), 3)
        group = await start_group(stub, spec)
        assert (await run_to_end(stub, group.id)).status == pb.GROUP_STATUS_COMPLETED
        assert (await start_group(stub, spec)).id == group.id  # takes no places
        await stub.CancelRollout(pb.CancelRolloutRequest(rollout_id=busy.rollout.id))
        whole = await start_group(stub, group_spec(command_spec(), 4))  # every place is free
        assert (await run_to_end(stub, whole.id)).status == pb.GROUP_STATUS_COMPLETED


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"n": 0}, "spec.n"),
        ({"min_complete": 4}, "spec.min_complete"),
        ({"max_refills": 1000}, "spec.max_refills"),
        ({"instruction": ""}, "spec.spec.task.instruction"),
        ({"temperature": 3.0}, "spec.spec.sampling.temperature"),
    ],
)
async def test_bad_group_input_names_the_field(
    group_stub: pb_grpc.RolloutServiceAsyncStub, change: dict[str, float], field: str
) -> None:
    spec = group_spec(command_spec(), 3)
    for name, value in change.items():
        if name == "instruction":
            spec.spec.task.instruction = ""
        elif name == "temperature":
            spec.spec.sampling.temperature = value
        else:
            setattr(spec, name, int(value))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await group_stub.StartGroup(pb.StartGroupRequest(spec=spec))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in violated_fields(refused.value)


async def test_a_request_id_names_one_group(group_stub: pb_grpc.RolloutServiceAsyncStub) -> None:
    spec = group_spec(command_spec("true", request_id=f"group-{uuid.uuid4()}"), 2)
    first, again = await asyncio.gather(
        start_group(group_stub, spec), start_group(group_stub, spec)
    )
    assert first.id == again.id
    assert (await run_to_end(group_stub, first.id)).status == pb.GROUP_STATUS_COMPLETED
    assert (await start_group(group_stub, spec)).id == first.id
    spec.n = 3
    with pytest.raises(grpc.aio.AioRpcError) as conflict:
        await start_group(group_stub, spec)
    assert conflict.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert violated_fields(conflict.value) == ["spec.spec.request_id"]


async def test_an_unknown_group_is_not_found(
    group_stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await group_stub.GetGroup(pb.GetGroupRequest(group_id="no-such-group"))
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND


async def _phases(stub: pb_grpc.RolloutServiceAsyncStub, rollout_id: str) -> list[int]:
    """The phases a rollout went through, from its replayed events."""
    events = stub.WatchRollout(pb.WatchRolloutRequest(rollout_id=rollout_id))
    return [r.event.phase.phase async for r in events if r.event.HasField("phase")]


async def _member_in_agent_phase(
    stub: pb_grpc.RolloutServiceAsyncStub, group_id: str
) -> pb.Rollout:
    """The first member seen entering the AGENT phase, as it is then."""
    events = stub.WatchRollout(pb.WatchRolloutRequest(labels={GROUP_LABEL: group_id}))
    async for response in events:
        event = response.event
        if event.HasField("phase") and event.phase.phase == pb.PHASE_AGENT:
            events.cancel()
            request = pb.GetRolloutRequest(rollout_id=event.rollout_id)
            return (await stub.GetRollout(request)).rollout
    raise AssertionError("no member reached the agent phase")
