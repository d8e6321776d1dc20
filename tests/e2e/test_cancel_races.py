"""Cancels that race a rollout's end: each returns, and the rollout's place is always freed.

The window is made wide and certain by holding the server's SQLite write lock from the test
(a real lock on the real file): the rollout finishes, publishes its final event, and waits
to save it; the cancel lands exactly then. On a server with room for two rollouts (one
running, one queued), three leaked places would refuse all further work.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import grpc
import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.server_process import ServerProcess
from testing.specs import command_spec

pytestmark = pytest.mark.e2e

_HANG_GUARD_S = 60.0
"""A deadline on calls that used to hang forever; never reached when they return."""
_ROUNDS = 3


@pytest.fixture
async def small_server(
    fresh_server: ServerProcess,
) -> AsyncIterator[pb_grpc.RolloutServiceAsyncStub]:
    fresh_server.env |= {"ROLLOUT_MAX_RUNNING": "1", "ROLLOUT_MAX_QUEUED": "1"}
    target = fresh_server.start()
    async with grpc.aio.insecure_channel(target) as channel:
        yield pb_grpc.RolloutServiceStub(channel)


@contextmanager
def write_lock(database: Path) -> Iterator[sqlite3.Connection]:
    """Hold the database's write lock (as another process writing would) until the block ends."""
    conn = sqlite3.connect(database, isolation_level=None, timeout=30, check_same_thread=False)
    try:
        conn.execute("BEGIN IMMEDIATE")
        yield conn
        conn.execute("ROLLBACK")
    finally:
        conn.close()


@asynccontextmanager
async def saves_held(database: Path, rollout_id: str) -> AsyncIterator[None]:
    """While inside, the server cannot save; the rollout is checked to be still unfinished."""
    lock = write_lock(database)
    conn = await asyncio.to_thread(lock.__enter__)
    try:
        query = "SELECT status FROM rollouts WHERE id = ?"
        (status,) = conn.execute(query, (rollout_id,)).fetchone()
        assert status in ("queued", "running"), "the rollout ended before the lock was taken"
        yield
    finally:
        await asyncio.to_thread(lock.__exit__, None, None, None)


async def final_event(
    stub: pb_grpc.RolloutServiceAsyncStub, request: pb.WatchRolloutRequest
) -> str:
    """The id of the first rollout whose final event the watch shows (read from memory)."""
    async for response in stub.WatchRollout(request):
        if response.event.HasField("finished"):
            return response.event.rollout_id
    raise AssertionError("the watch ended without a final event")


async def first_event(
    stub: pb_grpc.RolloutServiceAsyncStub, request: pb.WatchRolloutRequest
) -> str:
    async for response in stub.WatchRollout(request):
        return response.event.rollout_id
    raise AssertionError("the watch ended without an event")


async def landed() -> None:
    """Give a request already sent the moment it needs to reach its handler."""
    await asyncio.sleep(0.5)


async def test_cancel_as_the_rollout_finishes_returns_and_frees_its_place(
    small_server: pb_grpc.RolloutServiceAsyncStub, fresh_server: ServerProcess
) -> None:
    stub = small_server
    for _ in range(_ROUNDS):
        started = await stub.StartRollout(pb.StartRolloutRequest(spec=command_spec("sleep 1")))
        rollout_id = started.rollout.id
        async with saves_held(fresh_server.state_dir / "rollouts.db", rollout_id):
            await final_event(stub, pb.WatchRolloutRequest(rollout_id=rollout_id))
            cancel = asyncio.ensure_future(
                stub.CancelRollout(
                    pb.CancelRolloutRequest(rollout_id=rollout_id), timeout=_HANG_GUARD_S
                )
            )
            await landed()
        cancelled = await cancel
        assert cancelled.rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, "it had already finished"
    after = await stub.RunRollout(pb.RunRolloutRequest(spec=command_spec("true")))
    assert after.rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED


async def test_run_caller_leaving_as_the_rollout_finishes_frees_its_place(
    small_server: pb_grpc.RolloutServiceAsyncStub, fresh_server: ServerProcess
) -> None:
    stub = small_server
    for _ in range(_ROUNDS):
        labels = {"race": uuid.uuid4().hex}
        watch = pb.WatchRolloutRequest(labels=labels)
        seen = asyncio.ensure_future(first_event(stub, watch))
        ended = asyncio.ensure_future(final_event(stub, watch))
        await landed()
        call = stub.RunRollout(pb.RunRolloutRequest(spec=command_spec("sleep 1", labels=labels)))
        answered = asyncio.ensure_future(call)
        await asyncio.wait([seen, answered], return_when=asyncio.FIRST_COMPLETED)
        if answered.done():
            answered.result()  # refused: a place was leaked; raises RESOURCE_EXHAUSTED
        rollout_id = await seen
        async with saves_held(fresh_server.state_dir / "rollouts.db", rollout_id):
            assert await ended == rollout_id
            answered.cancel()
            await landed()
        got = await stub.GetRollout(
            pb.GetRolloutRequest(rollout_id=rollout_id), timeout=_HANG_GUARD_S
        )
        assert got.rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED
    after = await stub.RunRollout(pb.RunRolloutRequest(spec=command_spec("true")))
    assert after.rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED


async def test_cancel_while_queued_and_during_shutdown_both_end_cancelled(
    fresh_server: ServerProcess,
) -> None:
    fresh_server.env |= {
        "ROLLOUT_MAX_RUNNING": "1",
        "ROLLOUT_MAX_QUEUED": "1",
        "ROLLOUT_SHUTDOWN_GRACE_S": "30",
    }
    target = fresh_server.start()
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.RolloutServiceStub(channel)
        running = await stub.StartRollout(pb.StartRolloutRequest(spec=command_spec("sleep 300")))
        queued = await stub.StartRollout(pb.StartRolloutRequest(spec=command_spec("sleep 300")))
        await first_event(stub, pb.WatchRolloutRequest(rollout_id=queued.rollout.id))
        os.kill(fresh_server.pid, signal.SIGTERM)
        cancels = [
            stub.CancelRollout(
                pb.CancelRolloutRequest(rollout_id=rollout.id, reason="race"),
                timeout=_HANG_GUARD_S,
            )
            for rollout in (queued.rollout, running.rollout)
        ]
        for response in await asyncio.gather(*cancels):
            assert response.rollout.status == pb.ROLLOUT_STATUS_CANCELLED
            assert response.rollout.result.error.message == "cancelled: race"
    assert fresh_server.stop() == 0
