"""A replica cut off from the database (a TCP relay between it and PostgreSQL, severed) while
its rollout runs: once its heartbeats have failed for a whole lease by its own clock, it stops
the rollout and ends its sandbox's processes at once, while it is still cut off, so that the
other replica's takeover never runs beside it. Mended, it gives that lease up, leaves the
takeover's end as it is, and serves new work under a new lease.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import grpc
import psycopg
import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.server_process import ServerProcess
from testing.specs import command_spec
from tests.e2e.db_relay import Relay, relayed_pair
from tests.e2e.test_replicas import _processes_with, events_until_ready
from tests.e2e.test_replicas import database_url as database_url  # the PostgreSQL fixture

pytestmark = pytest.mark.e2e

_LEASE_S = 4
_STOPPED = "could not reach the database"
_LOST = "lost this server's database lease"


@pytest.fixture
def cut_off(
    tmp_path_factory: pytest.TempPathFactory, database_url: str
) -> Iterator[tuple[ServerProcess, ServerProcess, Relay]]:
    """Server "cut" reaches the database through a relay, "taker" directly."""
    env = {"ROLLOUT_DATABASE_LEASE_S": str(_LEASE_S)}
    with relayed_pair(tmp_path_factory, database_url, ("cut", "taker"), env) as pair:
        yield pair


async def _until(condition: str, check: Callable[[], bool], limit_s: float) -> None:
    """Poll `check()` until it is true; fail naming `condition` if it is not after `limit_s`
    (a bound on a thing that must happen, not on its speed: without it, it never does)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    while not check():
        assert loop.time() < deadline, f"not {condition} after {limit_s} s"
        await asyncio.sleep(0.1)


async def test_a_replica_cut_off_from_the_database_stops_its_sandbox_before_it_reconnects(
    cut_off: tuple[ServerProcess, ServerProcess, Relay], database_url: str
) -> None:
    server_a, server_b, relay = cut_off
    marker = "603.125"  # the agent's sleep, found in /proc while it lives
    spec = command_spec(f"echo replica-ready; exec sleep {marker}")
    async with (
        grpc.aio.insecure_channel(server_a.target) as to_a,
        grpc.aio.insecure_channel(server_b.target) as to_b,
    ):
        a, b = pb_grpc.RolloutServiceStub(to_a), pb_grpc.RolloutServiceStub(to_b)
        started = await a.StartRollout(pb.StartRolloutRequest(spec=spec))
        rollout_id = started.rollout.id
        on_b = b.WatchRollout(pb.WatchRolloutRequest(rollout_id=rollout_id))
        await events_until_ready(on_b)
        assert _processes_with(f"sleep {marker}")

        relay.sever()
        # Still cut off: its own clock stops the run within the lease (plus the teardown).
        await _until(
            "stopped while cut off",
            lambda: not _processes_with(f"sleep {marker}"),
            limit_s=_LEASE_S * 5,
        )
        assert _STOPPED in server_a.text()
        assert _LOST not in server_a.text()  # it has not reached the database since
        last = [response.event async for response in on_b][-1]  # B took it over
        final = last.finished
        relay.mend()

        await _until("reconnected", lambda: _LOST in server_a.text(), limit_s=_LEASE_S * 10)
        after = await a.RunRollout(pb.RunRolloutRequest(spec=command_spec(verify=("true",))))
        fetched = await b.GetRollout(pb.GetRolloutRequest(rollout_id=rollout_id))
        on_a = await a.GetRollout(pb.GetRolloutRequest(rollout_id=rollout_id))

    assert final.status == pb.ROLLOUT_STATUS_FAILED
    assert final.result.error.kind == pb.ERROR_KIND_INTERNAL
    assert final.result.error.message.endswith("ended by taker")
    for rollout in (fetched.rollout, on_a.rollout):
        assert rollout.status == pb.ROLLOUT_STATUS_FAILED
        assert rollout.result.error.message == final.result.error.message
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT instance, (SELECT max(seq) FROM events WHERE rollout_id = %s)"
            " FROM rollouts WHERE id = %s",
            (rollout_id, rollout_id),
        ).fetchone()
    assert row == ("taker", last.seq)  # the takeover's record, and nothing after its end
    assert after.rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED
    assert not _processes_with(f"sleep {marker}")
    assert not _processes_with(rollout_id)
