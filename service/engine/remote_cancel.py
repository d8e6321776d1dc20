"""Cancelling a rollout another server sharing the store runs (replicas on PostgreSQL):
the request goes through the store, which tells the owner (`on_cancel_request`), and the
caller follows the rollout's events until its final one, for a bounded wait."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from service.models import TERMINAL_STATUSES, Rollout
from service.store import RolloutStore

__all__ = ["cancel_elsewhere"]

_REMOTE_CANCEL_WAIT_S = 10.0
"""How long a CancelRollout for a rollout another server runs waits for its end."""


async def cancel_elsewhere(
    store: RolloutStore, rollout: Rollout, reason: str, reread: Callable[[], Awaitable[Rollout]]
) -> Rollout:
    """Ask the server that runs `rollout` to cancel it, and follow its events until the final
    one for up to _REMOTE_CANCEL_WAIT_S. One no live server runs (its lease expired: the
    takeover ends it), or that outlasts the wait, is returned as it stands (`reread`)."""
    if rollout.status in TERMINAL_STATUSES or not await store.request_cancel(rollout.id, reason):
        return rollout
    final: Rollout | None = None
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(_REMOTE_CANCEL_WAIT_S):
            async for event in store.follow_events(rollout.id, after_seq=0):
                if isinstance(event.payload, Rollout):
                    final = event.payload
    stored = await reread()
    # The owner stores the final event before its final save of the row, and may save the
    # terminal status before that (its result and finish time come with the final save):
    # the row is the answer once it is finished, else the final event is.
    if final is not None and (stored.status not in TERMINAL_STATUSES or stored.finish_time is None):
        return final
    return stored
