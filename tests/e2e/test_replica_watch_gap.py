"""A label-wide watch on a replica whose notifications (its LISTEN connection) are down while
a rollout begins and ends on another replica: once it listens again, it reads what it missed
from the store, so the watch still gets that rollout, in order and once, between the ones
before and after the gap.

Replica A reaches PostgreSQL through a relay, which severs A's listening connection alone (and
each one it opens) until it is mended, A's pool and lease staying up; or every connection of
A's, so that its reads fail too (shorter than its lease).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator

import grpc
import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.server_process import ServerProcess
from testing.specs import command_spec
from tests.e2e.db_relay import Relay, relayed_pair
from tests.e2e.test_replica_fencing import _logged
from tests.e2e.test_replicas import database_url as database_url  # the PostgreSQL fixture

# A cut of every connection costs the pool its reconnect back-off (about 80 s in all).
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

_STOPPED = "stopped listening for other servers' events"
_UNREAD = "could not read other servers' events"
_LIMIT_S = 60.0
"""How long a watch may take to deliver a rollout before the test calls it missed."""


@pytest.fixture
def relayed_replicas(
    tmp_path_factory: pytest.TempPathFactory, database_url: str
) -> Iterator[tuple[ServerProcess, ServerProcess, Relay]]:
    """Server A reaches the database through a relay, server B directly."""
    with relayed_pair(tmp_path_factory, database_url, ("a", "b"), {}) as pair:
        yield pair


async def _until_final(
    watch: AsyncIterator[pb.WatchRolloutResponse],
    rollout_id: str,
    seen: list[pb.RolloutEvent],
) -> None:
    """Read `watch` into `seen` until `rollout_id`'s final event."""
    async with asyncio.timeout(_LIMIT_S):
        while True:
            response = await anext(watch)
            seen.append(response.event)
            if response.event.rollout_id == rollout_id and response.event.HasField("finished"):
                return


@pytest.mark.parametrize(
    ("application", "logged"), [("rollout-listen", _STOPPED), ("", _UNREAD)], ids=["listen", "all"]
)
async def test_a_label_watch_gets_a_rollout_that_began_and_ended_while_it_was_not_listening(
    relayed_replicas: tuple[ServerProcess, ServerProcess, Relay], application: str, logged: str
) -> None:
    server_a, server_b, relay = relayed_replicas
    labels = {"gap": uuid.uuid4().hex}
    spec = command_spec("echo hello", verify=("true",), labels=labels)
    seen: list[pb.RolloutEvent] = []
    async with (
        grpc.aio.insecure_channel(server_a.target) as to_a,
        grpc.aio.insecure_channel(server_b.target) as to_b,
    ):
        a, b = pb_grpc.RolloutServiceStub(to_a), pb_grpc.RolloutServiceStub(to_b)
        watch = a.WatchRollout(pb.WatchRolloutRequest(labels=labels))
        events = aiter(watch)
        # Followed live: it ticks until cancelled, so a tick reaches A whenever its watch began.
        ticking = command_spec("while :; do echo tick; sleep 0.2; done", labels=labels)
        ids = [(await b.StartRollout(pb.StartRolloutRequest(spec=ticking))).rollout.id]
        while not any(event.output.text for event in seen):
            seen.append((await anext(events)).event)
        await b.CancelRollout(pb.CancelRolloutRequest(rollout_id=ids[-1]))
        await _until_final(events, ids[-1], seen)

        relay.sever(application)
        await asyncio.wait_for(_logged(server_a, logged), _LIMIT_S)
        during = await b.RunRollout(pb.RunRolloutRequest(spec=spec))  # unnoticed by A
        ids.append(during.rollout.id)
        relay.mend()
        await _until_final(events, ids[-1], seen)

        after = await b.RunRollout(pb.RunRolloutRequest(spec=spec))  # live again
        ids.append(after.rollout.id)
        await _until_final(events, ids[-1], seen)
        watch.cancel()

    keys = [(event.rollout_id, event.seq) for event in seen]
    assert len(keys) == len(set(keys)), "an event came twice"
    assert list(dict.fromkeys(event.rollout_id for event in seen)) == ids
    for rollout_id, status in zip(
        ids, (pb.ROLLOUT_STATUS_CANCELLED,) + (pb.ROLLOUT_STATUS_SUCCEEDED,) * 2, strict=True
    ):
        seqs = [seq for rid, seq in keys if rid == rollout_id]
        first = seqs[0] if rollout_id == ids[0] else 1  # the ticker from whenever the watch began
        assert seqs == list(range(first, first + len(seqs)))
        final = [e.finished for e in seen if e.rollout_id == rollout_id and e.HasField("finished")]
        assert [rollout.status for rollout in final] == [status]
