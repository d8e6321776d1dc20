"""A burst of watchers, from several clients at once, all get every event: gRPC core must not
refuse calls that wait for grpc.aio to accept them (it did past 1,000, as CANCELLED)."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator

import grpc
import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.server_process import ServerProcess
from testing.specs import command_spec

pytestmark = pytest.mark.e2e

_CLIENTS = 3
_WATCHERS = 1500
"""More calls than gRPC core's default pending limit (1,000) arriving in one burst."""


@pytest.fixture
async def channels(fresh_server: ServerProcess) -> AsyncIterator[list[grpc.aio.Channel]]:
    """One connection per client, as separate dashboards would have (no shared subchannel)."""
    target = fresh_server.start()
    opened = [
        grpc.aio.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)])
        for _ in range(_CLIENTS)
    ]
    try:
        await asyncio.gather(*(channel.channel_ready() for channel in opened))
        yield opened
    finally:
        await asyncio.gather(*(channel.close() for channel in opened))


async def watch(stub: pb_grpc.RolloutServiceAsyncStub, rollout_id: str) -> list[int]:
    request = pb.WatchRolloutRequest(rollout_id=rollout_id)
    return [response.event.seq async for response in stub.WatchRollout(request)]


async def test_a_burst_of_watchers_on_several_connections_all_get_every_event(
    fresh_server: ServerProcess, channels: list[grpc.aio.Channel]
) -> None:
    stubs = [pb_grpc.RolloutServiceStub(channel) for channel in channels]
    ran = await stubs[0].RunRollout(pb.RunRolloutRequest(spec=command_spec("echo hi")))
    rollout_id = ran.rollout.id
    expected = await watch(stubs[0], rollout_id)
    # Stopped, the server reads none of the calls; resumed, gRPC core takes them all in one
    # burst, far faster than grpc.aio accepts them: they wait in core's pending queue.
    os.kill(fresh_server.pid, signal.SIGSTOP)
    try:
        watchers = [
            asyncio.ensure_future(watch(stubs[i % _CLIENTS], rollout_id)) for i in range(_WATCHERS)
        ]
        await asyncio.sleep(1)  # the calls' HEADERS reach the server's socket
    finally:
        os.kill(fresh_server.pid, signal.SIGCONT)
    outcomes = await asyncio.gather(*watchers, return_exceptions=True)

    failed = [o for o in outcomes if isinstance(o, BaseException)]
    assert not failed, f"{len(failed)} of {_WATCHERS} watchers failed, e.g. {failed[0]!r}"
    assert expected[-1] > 1
    assert all(seqs == expected for seqs in outcomes)
