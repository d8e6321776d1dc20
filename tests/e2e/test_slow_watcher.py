"""A watcher that stops reading is cut off with a status saying how to resume, while the rollout
and the other watchers of it go on; what every watcher gets is what GetRollout says."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator

import grpc
import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.server_process import ServerProcess
from testing.specs import command_spec
from tests.e2e.test_watch import collect

pytestmark = pytest.mark.e2e

_BACKLOG_EVENTS = 200
_CHUNKS = 1000
"""Agent output lines of 32 KiB: far more than gRPC buffers for a stream (a few MiB) plus
the backlog, so a watcher that never reads must be cut off."""


@pytest.fixture
async def stub(fresh_server: ServerProcess) -> AsyncIterator[pb_grpc.RolloutServiceAsyncStub]:
    fresh_server.env["ROLLOUT_WATCH_BACKLOG_EVENTS"] = str(_BACKLOG_EVENTS)
    fresh_server.env["ROLLOUT_AGENT_OUTPUT_EVENT_BYTES"] = str(64 * 1024 * 1024)
    async with grpc.aio.insecure_channel(fresh_server.start()) as channel:
        yield pb_grpc.RolloutServiceStub(channel)


def chatty_spec() -> pb.RolloutSpec:
    line = "$(printf '%032767d' 0)"
    return command_spec(
        f'line="{line}"; for i in $(seq {_CHUNKS}); do echo "$line"; sleep 0.003; done'
    )


async def read_to_the_end(
    call: AsyncIterable[pb.WatchRolloutResponse],
) -> tuple[list[pb.RolloutEvent], grpc.aio.AioRpcError | None]:
    """The events a call delivers, and the error status it ends with (None: it ended OK)."""
    received: list[pb.RolloutEvent] = []
    try:
        async for response in call:
            received.append(response.event)
    except grpc.aio.AioRpcError as exc:
        return received, exc
    return received, None


async def test_a_watcher_that_never_reads_is_cut_off_and_resumes_where_it_stopped(
    stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    started = await stub.StartRollout(pb.StartRolloutRequest(spec=chatty_spec()))
    rollout_id = started.rollout.id
    request = pb.WatchRolloutRequest(rollout_id=rollout_id)
    never_read = stub.WatchRollout(request)  # the call starts now; nobody reads it yet

    reader = await collect(stub, rollout_id)

    assert [e.seq for e in reader] == list(range(1, len(reader) + 1))
    finished = reader[-1].finished
    assert finished.status == pb.ROLLOUT_STATUS_SUCCEEDED, finished.result.error
    received, cut_off = await read_to_the_end(never_read)
    assert cut_off is not None, "the watcher that never read was not cut off"
    assert cut_off.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    details = cut_off.details() or ""
    assert "events behind" in details
    assert f"at most {_BACKLOG_EVENTS}" in details
    assert "after_seq" in details
    assert 0 < len(received) < len(reader)
    assert received == reader[: len(received)]
    rest = await collect(stub, rollout_id, after_seq=received[-1].seq)
    assert received + rest == reader


async def test_watchers_decode_what_get_rollout_returns(
    stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    spec = command_spec("for i in 1 2 3; do echo line-$i; done", verify=("true",))
    started = await stub.StartRollout(pb.StartRolloutRequest(spec=spec))
    live = await collect(stub, started.rollout.id)
    replayed = await collect(stub, started.rollout.id)
    got = await stub.GetRollout(
        pb.GetRolloutRequest(rollout_id=started.rollout.id, view=pb.RESULT_VIEW_SLIM)
    )
    assert live == replayed
    assert live[-1].finished == got.rollout
