"""Through the real server: a rollout whose model calls are all paused lends its running slot.

One running slot (ROLLOUT_MAX_RUNNING=1) and two tenants: tenant a pauses its rollout A's
calls (a weight sync); tenant b's rollout B, queued behind A, runs to its end meanwhile
rather than waiting out a's pause. On the resume A takes a slot again, and its call goes on.
A cancelled while paused gives everything back: later rollouts still run, no process stays.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Iterator

import grpc
import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.fakes.llm_upstream import FakeUpstream, Reply
from testing.server_process import ServerProcess, running
from testing.specs import command_spec, model_calls
from tests.e2e.auth_support import TENANT_A_TOKEN, TENANT_B_TOKEN, bearer
from tests.e2e.processes import eventually, processes_with

pytestmark = pytest.mark.e2e

MODEL = "policy-under-training"
TOKENS = json.dumps([f"{TENANT_A_TOKEN} tenant-a", f"{TENANT_B_TOKEN} tenant-b"])
Bearer = tuple[tuple[str, str], ...]
A, B = bearer(TENANT_A_TOKEN), bearer(TENANT_B_TOKEN)


@pytest.fixture(scope="module")
def one_slot_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    env = {
        "ROLLOUT_AUTH_TOKENS": TOKENS,
        "ROLLOUT_MAX_RUNNING": "1",
        "ROLLOUT_MAX_QUEUED": "2",
    }
    server = ServerProcess(tmp_path_factory.mktemp("one-slot"), env=env)
    with running(server):
        yield server


@pytest.fixture
async def stub(one_slot_server: ServerProcess) -> AsyncIterator[pb_grpc.RolloutServiceAsyncStub]:
    async with grpc.aio.insecure_channel(one_slot_server.target) as channel:
        yield pb_grpc.RolloutServiceStub(channel)


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream(model=MODEL) as upstream:
        yield upstream


def paused_spec(upstream: FakeUpstream, labels: dict[str, str], marker: str) -> pb.RolloutSpec:
    """One model call, then `done`; `marker` is in its shell's command line while it lives."""
    return command_spec(
        f": {marker}\n{model_calls(1)}",
        verify=("test -f done",),
        endpoint={"base_url": upstream.base_url, "model": MODEL},
        labels=labels,
    )


async def start(
    stub: pb_grpc.RolloutServiceAsyncStub, spec: pb.RolloutSpec, metadata: Bearer
) -> str:
    response = await stub.StartRollout(pb.StartRolloutRequest(spec=spec), metadata=metadata)
    return response.rollout.id


async def until_output(
    stub: pb_grpc.RolloutServiceAsyncStub, rollout_id: str, text: str, metadata: Bearer
) -> None:
    request = pb.WatchRolloutRequest(rollout_id=rollout_id)
    async for response in stub.WatchRollout(request, metadata=metadata):
        if response.event.HasField("output") and text in response.event.output.text:
            return
    raise AssertionError(f"the rollout ended without printing {text!r}")


async def finished(
    stub: pb_grpc.RolloutServiceAsyncStub, rollout_id: str, metadata: Bearer
) -> pb.Rollout:
    """The rollout once ended, turns and all (the final event carries no turns)."""
    request = pb.WatchRolloutRequest(rollout_id=rollout_id)
    async with asyncio.timeout(120):
        async for response in stub.WatchRollout(request, metadata=metadata):
            if response.event.HasField("finished"):
                return await status(stub, rollout_id, metadata)
    raise AssertionError("the watch ended without a final event")


async def status(
    stub: pb_grpc.RolloutServiceAsyncStub, rollout_id: str, metadata: Bearer
) -> pb.Rollout:
    request = pb.GetRolloutRequest(rollout_id=rollout_id)
    return (await stub.GetRollout(request, metadata=metadata)).rollout


async def paused_at_its_call(
    stub: pb_grpc.RolloutServiceAsyncStub, upstream: FakeUpstream, marker: str
) -> tuple[str, pb.ModelCallSelector]:
    """Tenant a's rollout A, its model call held by a's pause (started before A)."""
    labels = {"sync": uuid.uuid4().hex}
    selector = pb.ModelCallSelector(labels=pb.LabelSelector(labels=labels))
    await stub.PauseModelCalls(pb.PauseModelCallsRequest(selector=selector), metadata=A)
    rollout_a = await start(stub, paused_spec(upstream, labels, marker), A)
    await asyncio.wait_for(until_output(stub, rollout_a, "calling 0", A), 120)
    return rollout_a, selector


async def test_a_paused_rollout_lends_its_slot_to_another_tenants_queued_one(
    stub: pb_grpc.RolloutServiceAsyncStub, upstream: FakeUpstream
) -> None:
    upstream.script(Reply(text="after the sync"))
    marker = f"a-{uuid.uuid4().hex}"
    rollout_a, selector = await paused_at_its_call(stub, upstream, marker)
    rollout_b = await start(stub, command_spec("echo b > done", verify=("test -f done",)), B)

    b = await finished(stub, rollout_b, B)  # while A is still paused, in its sandbox
    assert b.status == pb.ROLLOUT_STATUS_SUCCEEDED, b.result.error
    a = await status(stub, rollout_a, A)
    assert a.status == pb.ROLLOUT_STATUS_RUNNING
    assert a.phase == pb.PHASE_AGENT
    assert processes_with(marker), "A's agent did not live on while paused"
    assert not upstream.requests

    await stub.ResumeModelCalls(pb.ResumeModelCallsRequest(selector=selector), metadata=A)
    a = await finished(stub, rollout_a, A)
    assert a.status == pb.ROLLOUT_STATUS_SUCCEEDED, a.result.error
    [turn] = a.result.turns
    assert turn.completion_text == "after the sync"
    assert turn.paused.ToTimedelta().total_seconds() > 0
    assert a.result.timings.paused.ToTimedelta().total_seconds() > 0
    assert len(upstream.requests) == 1


async def test_a_rollout_cancelled_while_paused_frees_its_slot_and_place(
    stub: pb_grpc.RolloutServiceAsyncStub, upstream: FakeUpstream
) -> None:
    marker = f"a-{uuid.uuid4().hex}"
    rollout_a, selector = await paused_at_its_call(stub, upstream, marker)
    rollout_b = await start(stub, command_spec("echo b-running; sleep 1; echo b > done"), B)
    await asyncio.wait_for(until_output(stub, rollout_b, "b-running", B), 60)  # in A's slot

    await stub.CancelRollout(pb.CancelRolloutRequest(rollout_id=rollout_a), metadata=A)
    a = await finished(stub, rollout_a, A)
    assert a.status == pb.ROLLOUT_STATUS_CANCELLED
    await eventually(lambda: not processes_with(marker))
    b = await finished(stub, rollout_b, B)
    assert b.status == pb.ROLLOUT_STATUS_SUCCEEDED, b.result.error
    # A's slot and place are free again: two more rollouts, one after the other, both run.
    later = [await start(stub, command_spec("echo c > done"), metadata) for metadata in (A, B)]
    for rollout_id, metadata in zip(later, (A, B), strict=True):
        c = await finished(stub, rollout_id, metadata)
        assert c.status == pb.ROLLOUT_STATUS_SUCCEEDED, c.result.error
    await stub.ResumeModelCalls(pb.ResumeModelCallsRequest(selector=selector), metadata=A)
    assert not upstream.requests
