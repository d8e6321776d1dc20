"""WatchRollout's writing side: each event serialized once for all its watchers, and a watcher
that falls too far behind cut off with a status saying how to resume.

A thousand watchers of one rollout would otherwise cost a thousand proto conversions and
serializations per event. `EncodedEvents` keeps the wire bytes of recent events (a byte
budget, oldest out first), so every watcher after the first writes bytes already made; the
method is registered with an identity serializer for that (see `handlers`).

gRPC's asyncio server writes only from the call's own task, so each watcher still wakes once
per batch of new events; what it does then is a dictionary look-up and a write.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncIterator
from typing import Any

import grpc
from rollout.v1 import rollout_pb2 as pb

from service.api.convert import event_to_proto
from service.api.errors import abort
from service.engine import Backlog
from service.errors import CapacityError
from service.models import RolloutEvent

__all__ = ["EncodedEvents", "FallingBehind", "write_events"]

Context = grpc.aio.ServicerContext[Any, Any]


class EncodedEvents:
    """WatchRolloutResponse bytes of recent events, by (rollout id, seq), within a byte budget."""

    def __init__(self, budget_bytes: int) -> None:
        self._budget_bytes = budget_bytes
        self._held_bytes = 0
        self._encoded: OrderedDict[tuple[str, int], bytes] = OrderedDict()

    def get(self, event: RolloutEvent) -> bytes:
        key = (event.rollout_id, event.seq)
        data = self._encoded.get(key)
        if data is None:
            response = pb.WatchRolloutResponse(event=event_to_proto(event))
            data = response.SerializeToString(deterministic=True)
            self._encoded[key] = data
            self._held_bytes += len(data)
            while self._held_bytes > self._budget_bytes and len(self._encoded) > 1:
                self._held_bytes -= len(self._encoded.popitem(last=False)[1])
        return data


class FallingBehind:
    """The hub's `Backlog` callback for one watcher: cancels the watcher's task (stuck, maybe,
    on a write its client never reads) and remembers why, so that `write_events` answers the
    cancellation with a status instead of passing it on."""

    def __init__(self, limit_events: int) -> None:
        task = asyncio.current_task()
        assert task is not None, "a gRPC handler runs in a task"
        self._task = task
        self.backlog = Backlog(limit_events, self._cut_off)
        self.behind = 0

    def _cut_off(self, behind: int) -> None:
        self.behind = behind
        self._task.cancel()


async def write_events(
    context: Context,
    events: AsyncIterator[RolloutEvent],
    encoded: EncodedEvents,
    falling_behind: FallingBehind | None = None,
) -> None:
    """Write `events` to the call; a watcher cut off by `falling_behind` gets RESOURCE_EXHAUSTED
    naming the seq to resume after."""
    last_seq = 0
    try:
        async for event in events:
            await context.write(encoded.get(event))
            last_seq = event.seq
    except asyncio.CancelledError:
        if falling_behind is None or not falling_behind.behind:
            raise
        asyncio.current_task().uncancel()  # type: ignore[union-attr]
        message = (
            f"this watcher fell {falling_behind.behind} events behind (at most "
            f"{falling_behind.backlog.limit_events} may wait) and was cut off; "
            f"read faster, or resume with WatchRollout after_seq set to the last seq received "
            f"(seq {last_seq} was written to this stream)"
        )
        await abort(context, CapacityError(message))
