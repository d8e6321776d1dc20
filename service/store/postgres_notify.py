"""Cross-server wake-ups on PostgreSQL: NOTIFY names a rollout with new events, one LISTEN
connection per store wakes that rollout's followers.

`append_events` sends `NOTIFY_SQL` inside its transaction, so a notification is delivered at
commit, in commit order, and never for rows that were rolled back. The rows stay the truth: a
notification only says "look", and a follower also looks every POLL_S in case one was lost
(the listening connection dropped).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import psycopg

__all__ = ["NOTIFY_SQL", "POLL_S", "Notices"]

log = logging.getLogger(__name__)

_CHANNEL = "rollout_events"
NOTIFY_SQL = f"SELECT pg_notify('{_CHANNEL}', id) FROM unnest(%s::text[]) AS id"
"""Notify each rollout id of the one parameter (a list), once."""
POLL_S = 5.0
"""A follower reads the store again after this long without a notification."""


class Notices:
    """The followers of each rollout, woken by the notifications one connection receives."""

    def __init__(self) -> None:
        self._followers: dict[str, set[asyncio.Event]] = {}
        self._listener: asyncio.Task[None] | None = None

    async def start(self, url: str) -> None:
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
        await conn.execute(f"LISTEN {_CHANNEL}")
        self._listener = asyncio.create_task(self._listen(conn), name="postgres-listen")

    async def stop(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listener

    @contextlib.contextmanager
    def following(self, rollout_id: str) -> Iterator[asyncio.Event]:
        """An event set by each notification for `rollout_id` while the block runs: enter it
        before reading the store, so that no commit after the read goes unnoticed."""
        wake = asyncio.Event()
        followers = self._followers.setdefault(rollout_id, set())
        followers.add(wake)
        try:
            yield wake
        finally:
            followers.discard(wake)
            if not followers:
                self._followers.pop(rollout_id, None)

    async def _listen(self, conn: psycopg.AsyncConnection[Any]) -> None:
        async with conn:
            try:
                async for note in conn.notifies():
                    for wake in self._followers.get(note.payload, ()):
                        wake.set()
            except psycopg.OperationalError as exc:
                log.warning("stopped listening for other servers' events (%s); followers poll", exc)
