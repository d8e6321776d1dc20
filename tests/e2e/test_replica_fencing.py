"""Fencing: a replica alive but silent past its lease (SIGSTOP: a stalled host, a long pause)
is taken for dead, and another replica ends its rollout as interrupted. When it wakes up, it
finds its lease taken: it stops the run it no longer owns (sandbox torn down) and writes
nothing over the takeover's end, then serves new work under a new lease.

The rollout's agent sleeps a few seconds and then exits, with a verifier that passes: left to
itself, the stalled replica would wake to a rollout that ends SUCCEEDED and save it so.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator, Iterator

import grpc
import psycopg
import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.server_process import ServerProcess, running_all
from testing.specs import command_spec
from tests.e2e.test_replicas import _processes_with, events_until_ready
from tests.e2e.test_replicas import database_url as database_url  # the PostgreSQL fixture

pytestmark = pytest.mark.e2e

_LEASE_S = 4
"""Short, so that the test takes seconds; long enough for heartbeats on a loaded machine."""
_LOST = "lost this server's database lease"


@pytest.fixture(scope="module")
def replicas(
    tmp_path_factory: pytest.TempPathFactory, database_url: str
) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    """Two servers sharing the database; each must exit 0 at the end."""
    env = {"ROLLOUT_DATABASE_URL": database_url, "ROLLOUT_DATABASE_LEASE_S": str(_LEASE_S)}
    servers = [ServerProcess(tmp_path_factory.mktemp(f"fenced-{name}"), env) for name in "ab"]
    with running_all(servers):
        yield servers[0], servers[1]


@pytest.fixture
async def stubs(
    replicas: tuple[ServerProcess, ServerProcess],
) -> AsyncIterator[tuple[pb_grpc.RolloutServiceAsyncStub, pb_grpc.RolloutServiceAsyncStub]]:
    a, b = replicas
    async with (
        grpc.aio.insecure_channel(a.target) as to_a,
        grpc.aio.insecure_channel(b.target) as to_b,
    ):
        yield pb_grpc.RolloutServiceStub(to_a), pb_grpc.RolloutServiceStub(to_b)


def _stored_events(url: str, rollout_id: str) -> list[tuple[int, str]]:
    """(seq, kind) of every event row of the rollout, whatever a watcher would stop at."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT seq, kind FROM events WHERE rollout_id = %s ORDER BY seq", (rollout_id,)
        ).fetchall()
    return [(seq, kind) for seq, kind in rows]


async def _settled_on(stub: pb_grpc.RolloutServiceAsyncStub, rollout_id: str) -> pb.Rollout:
    """The rollout as `stub`'s server reads it once its status there is FAILED: a server reads
    a rollout it runs from memory, so this is also when it no longer runs it."""
    while True:
        rollout = (await stub.GetRollout(pb.GetRolloutRequest(rollout_id=rollout_id))).rollout
        if rollout.status == pb.ROLLOUT_STATUS_FAILED:
            return rollout
        await asyncio.sleep(0.1)


async def _logged(server: ServerProcess, line: str) -> None:
    while True:
        if line in server.text():
            return
        await asyncio.sleep(0.1)


async def test_a_stalled_replica_leaves_the_takeover_s_end_and_stops_its_run(
    replicas: tuple[ServerProcess, ServerProcess],
    stubs: tuple[pb_grpc.RolloutServiceAsyncStub, pb_grpc.RolloutServiceAsyncStub],
    database_url: str,
) -> None:
    server_a, _ = replicas
    a, b = stubs
    marker = "3.125"  # the agent's sleep, found in /proc while it lives
    spec = command_spec(f"echo replica-ready; sleep {marker}; echo done", verify=("true",))
    started = await a.StartRollout(pb.StartRolloutRequest(spec=spec))
    rollout_id = started.rollout.id
    on_b = b.WatchRollout(pb.WatchRolloutRequest(rollout_id=rollout_id))
    seen = await events_until_ready(on_b)

    os.kill(server_a.pid, signal.SIGSTOP)  # alive, but no heartbeat and no write
    try:
        seen += [response.event async for response in on_b]  # B took over and ended it
        taken_over = _stored_events(database_url, rollout_id)
    finally:
        os.kill(server_a.pid, signal.SIGCONT)
    await _logged(server_a, _LOST)
    on_a = await _settled_on(a, rollout_id)
    # It serves again, under its new lease; its rollout is its own, not taken for a dead one's.
    after = await a.RunRollout(pb.RunRolloutRequest(spec=command_spec(verify=("true",))))
    fetched = await b.GetRollout(pb.GetRolloutRequest(rollout_id=rollout_id))

    final = seen[-1].finished
    assert [event.seq for event in seen] == list(range(1, len(seen) + 1))
    assert final.status == pb.ROLLOUT_STATUS_FAILED
    assert final.result.error.kind == pb.ERROR_KIND_INTERNAL
    assert taken_over[-1][0] == seen[-1].seq
    assert _stored_events(database_url, rollout_id) == taken_over
    for rollout in (fetched.rollout, on_a):
        assert rollout.status == pb.ROLLOUT_STATUS_FAILED
        assert rollout.result.error.kind == pb.ERROR_KIND_INTERNAL
        assert rollout.result.error.message == final.result.error.message
    assert after.rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED
    assert server_a.text().count(_LOST) == 1
    assert not _processes_with(f"sleep {marker}")
    assert not _processes_with(rollout_id)
