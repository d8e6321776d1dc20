"""Admission and ending: capacity, idempotency, listing, cancellation, restart and SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import uuid

import grpc
import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.server_process import ServerProcess
from testing.specs import command_spec
from tests.e2e.processes import eventually, processes_with

pytestmark = pytest.mark.e2e


async def wait_for_phase(
    stub: pb_grpc.RolloutServiceAsyncStub, rollout_id: str, phase: int
) -> None:
    async for response in stub.WatchRollout(pb.WatchRolloutRequest(rollout_id=rollout_id)):
        if response.event.HasField("phase") and response.event.phase.phase == phase:
            return
    raise AssertionError(f"rollout ended before phase {phase}")


async def test_request_id_is_idempotent(stub: pb_grpc.RolloutServiceAsyncStub) -> None:
    spec = command_spec("sleep 0.3", request_id=f"req-{uuid.uuid4()}")
    first, second = await asyncio.gather(
        stub.StartRollout(pb.StartRolloutRequest(spec=spec)),
        stub.StartRollout(pb.StartRolloutRequest(spec=spec)),
    )
    assert first.rollout.id == second.rollout.id
    finished = await stub.RunRollout(pb.RunRolloutRequest(spec=spec))
    assert finished.rollout.id == first.rollout.id
    assert finished.rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED


async def test_list_filters_by_labels_and_status_and_pages(
    stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    batch = f"list-{uuid.uuid4().hex[:8]}"
    ids = set()
    for i in range(5):
        verify = ("true",) if i % 2 == 0 else ()
        spec = command_spec("exit 0", verify=verify, labels={"batch": batch})
        if i == 4:
            spec.task.setup.append("false")
        response = await stub.RunRollout(pb.RunRolloutRequest(spec=spec))
        ids.add(response.rollout.id)
    pages, token = [], ""
    while True:
        page = await stub.ListRollouts(
            pb.ListRolloutsRequest(labels={"batch": batch}, page_size=2, page_token=token)
        )
        pages.append([r.id for r in page.rollouts])
        token = page.next_page_token
        if not token:
            break
    listed = [rollout_id for page in pages for rollout_id in page]
    assert sorted(listed) == sorted(ids)
    assert len(pages) == 3
    failed = await stub.ListRollouts(
        pb.ListRolloutsRequest(labels={"batch": batch}, statuses=[pb.ROLLOUT_STATUS_FAILED])
    )
    assert len(failed.rollouts) == 1
    assert failed.rollouts[0].result.error.kind == pb.ERROR_KIND_SETUP


async def test_cancel_mid_agent_kills_every_process(stub: pb_grpc.RolloutServiceAsyncStub) -> None:
    marker = f"marker{uuid.uuid4().hex[:10]}"
    spec = command_spec(f"(sleep 300; echo {marker}) & sleep 301 # {marker}", verify=("true",))
    started = await stub.StartRollout(pb.StartRolloutRequest(spec=spec))
    await wait_for_phase(stub, started.rollout.id, pb.PHASE_AGENT)
    await eventually(lambda: processes_with(marker))
    cancelled = await stub.CancelRollout(
        pb.CancelRolloutRequest(rollout_id=started.rollout.id, reason="test says stop")
    )
    assert cancelled.rollout.status == pb.ROLLOUT_STATUS_CANCELLED
    assert cancelled.rollout.result.error.kind == pb.ERROR_KIND_CANCELLED
    assert "test says stop" in cancelled.rollout.result.error.message
    assert processes_with(marker) == []


async def test_client_cancelling_run_cancels_the_rollout(
    stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    marker = f"marker{uuid.uuid4().hex[:10]}"
    spec = command_spec(f"exec -a {marker} sleep 302", labels={"marker": marker})
    call = stub.RunRollout(pb.RunRolloutRequest(spec=spec))
    await eventually(lambda: processes_with(marker))
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    listed = pb.ListRolloutsRequest(labels={"marker": marker})
    for _ in range(100):
        rollouts = (await stub.ListRollouts(listed)).rollouts
        if rollouts and rollouts[0].status == pb.ROLLOUT_STATUS_CANCELLED:
            break
        await asyncio.sleep(0.1)
    assert rollouts[0].status == pb.ROLLOUT_STATUS_CANCELLED
    assert processes_with(marker) == []


async def test_capacity_is_resource_exhausted(fresh_server: ServerProcess) -> None:
    fresh_server.env |= {"ROLLOUT_MAX_RUNNING": "1", "ROLLOUT_MAX_QUEUED": "1"}
    target = fresh_server.start()
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.RolloutServiceStub(channel)
        running = await stub.StartRollout(pb.StartRolloutRequest(spec=command_spec("sleep 30")))
        queued = await stub.StartRollout(pb.StartRolloutRequest(spec=command_spec("sleep 30")))
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.StartRollout(pb.StartRolloutRequest(spec=command_spec()))
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        got = await stub.GetRollout(pb.GetRolloutRequest(rollout_id=queued.rollout.id))
        assert got.rollout.status == pb.ROLLOUT_STATUS_QUEUED
        cancelled = await stub.CancelRollout(pb.CancelRolloutRequest(rollout_id=queued.rollout.id))
        assert cancelled.rollout.status == pb.ROLLOUT_STATUS_CANCELLED
        assert cancelled.rollout.result.sandbox_id == ""
        await stub.CancelRollout(pb.CancelRolloutRequest(rollout_id=running.rollout.id))


async def test_sigterm_cancels_in_flight_and_exits_zero(fresh_server: ServerProcess) -> None:
    marker = f"marker{uuid.uuid4().hex[:10]}"
    fresh_server.env |= {"ROLLOUT_SHUTDOWN_GRACE_S": "1"}
    target = fresh_server.start()
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.RolloutServiceStub(channel)
        started = await stub.StartRollout(
            pb.StartRolloutRequest(spec=command_spec(f"exec -a {marker} sleep 303"))
        )
        await wait_for_phase(stub, started.rollout.id, pb.PHASE_AGENT)
        await eventually(lambda: processes_with(marker))
    assert fresh_server.stop(signal.SIGTERM) == 0
    assert processes_with(marker) == []
    target = fresh_server.start()
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.RolloutServiceStub(channel)
        got = await stub.GetRollout(pb.GetRolloutRequest(rollout_id=started.rollout.id))
    assert got.rollout.status == pb.ROLLOUT_STATUS_CANCELLED
    assert "shutting down" in got.rollout.result.error.message


async def test_restart_fails_interrupted_rollouts(fresh_server: ServerProcess) -> None:
    marker = f"marker{uuid.uuid4().hex[:10]}"
    target = fresh_server.start()
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.RolloutServiceStub(channel)
        started = await stub.StartRollout(
            pb.StartRolloutRequest(spec=command_spec(f"exec -a {marker} sleep 304"))
        )
        await wait_for_phase(stub, started.rollout.id, pb.PHASE_AGENT)
        await eventually(lambda: processes_with(marker))
    fresh_server.stop(signal.SIGKILL)
    await eventually(lambda: processes_with(marker) == [])
    target = fresh_server.start()
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.RolloutServiceStub(channel)
        got = await stub.GetRollout(pb.GetRolloutRequest(rollout_id=started.rollout.id))
        events = [
            r.event
            async for r in stub.WatchRollout(pb.WatchRolloutRequest(rollout_id=started.rollout.id))
        ]
    assert got.rollout.status == pb.ROLLOUT_STATUS_FAILED
    assert got.rollout.result.error.kind == pb.ERROR_KIND_INTERNAL
    assert "interrupted by restart" in got.rollout.result.error.message
    assert events[-1].HasField("finished")
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
