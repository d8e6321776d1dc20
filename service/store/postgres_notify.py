"""Cross-server wake-ups on PostgreSQL: NOTIFY names a rollout with new events (or a group
saved, on its own channel), one LISTEN connection per store wakes that rollout's (or group's)
followers and hands every rollout id to the label-wide followers (`following_all`); the same
connection also listens on its run's own cancel channel (`cancel_channel`), where another
server tells it that it recorded a request to cancel a rollout or a group it runs.

`append_events` sends `NOTIFY_SQL` inside its statement (a transaction), so a notification is
delivered at commit, in commit order, and never for rows that were rolled back. The rows stay
the truth: a notification only says "look", and a follower also looks every POLL_S in case one
was lost (the listening connection dropped). So with cancel requests: the store takes its run's
recorded requests when woken (`cancel_requested`) and every POLL_S.

A dropped listening connection is connected again (every _RECONNECT_S until it is); then every
follower is woken, and each label-wide follower is handed `Reconnected`, naming when the last
notification before the drop came, so that it looks in the store for what it missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

__all__ = [
    "GROUP_NOTIFY_SQL",
    "NOTIFY_SQL",
    "POLL_S",
    "CancelHandler",
    "Notices",
    "Reconnected",
    "cancel_channel",
]

log = logging.getLogger(__name__)

_CHANNEL = "rollout_events"
NOTIFY_SQL = f"SELECT pg_notify('{_CHANNEL}', id) FROM unnest(%(ids)s::text[]) AS id"
"""Notify each rollout id of the parameter `ids` (a list), once."""
_GROUP_CHANNEL = "rollout_groups"
GROUP_NOTIFY_SQL = f"SELECT pg_notify('{_GROUP_CHANNEL}', %s)"
"""Notify the group id of the one parameter (its row was just written)."""
POLL_S = 5.0
"""A follower reads the store again after this long without a notification (and the store
takes its run's cancel requests)."""

_RECONNECT_S = 1.0
"""How often a dropped listening connection tries to connect again."""
_APPLICATION_NAME = "rollout-listen"
"""The listening connection's name in pg_stat_activity."""
_KEEPALIVE_IDLE_S = 10
"""A listening connection only reads, so a peer gone without a reset (a partition, a dead
host) is noticed only by TCP keepalives, and no gap is caught up before it is: probes after
this long idle, then 3 every 5 s, so within ~25 s rather than the kernel's ~2 h (libpq ignores
them on a Unix socket)."""

CancelHandler = Callable[[str, str], None]
"""Called with (rollout_id, reason) when another server asks this one to cancel a rollout (or
(group_id, reason), a group)."""


@dataclass(frozen=True)
class Reconnected:
    """Handed to label-wide followers once notifications flow again after a gap: what other
    servers stored since `since` (time.time() of the last notification before it) may have
    gone unnoticed."""

    since: float


def cancel_channel(owner: str) -> str:
    """The channel on which the server run `owner` (a uuid hex) hears cancel requests; the
    store's NOTIFY builds the same name in SQL."""
    return f"rollout_cancel_{owner}"


class Notices:
    """The followers of each rollout, woken by the notifications one connection receives."""

    def __init__(self, owner: str) -> None:
        self._followers: dict[str, set[asyncio.Event]] = {}
        self._listener: asyncio.Task[None] | None = None
        self._cancels = cancel_channel(owner)
        """The cancel channel of the run's current lease (`start` moves it to a new one)."""
        self._everyone: set[asyncio.Queue[str | Reconnected]] = set()
        self._seen_at: float | None = None
        """time.time() of the last notification (or of listening), None before the first start."""
        self.cancel_requested = asyncio.Event()
        """Set by each notification on the run's cancel channel: a request was recorded."""

    async def start(self, url: str, owner: str) -> None:
        """Listen, with `owner`'s cancel channel (a run that lost its lease starts again)."""
        self._cancels = cancel_channel(owner)
        conn = await self._connect(url)
        self._listener = asyncio.create_task(self._listen(url, conn), name="postgres-listen")

    async def _connect(self, url: str) -> psycopg.AsyncConnection[Any]:
        """Listen on a new connection; once it listens, what came before it was missed."""
        conn = await psycopg.AsyncConnection.connect(
            url,
            autocommit=True,
            application_name=_APPLICATION_NAME,
            keepalives=1,
            keepalives_idle=_KEEPALIVE_IDLE_S,
            keepalives_interval=5,
            keepalives_count=3,
        )
        try:
            await conn.execute(f"LISTEN {_CHANNEL}")
            await conn.execute(f"LISTEN {_GROUP_CHANNEL}")
            await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._cancels)))
        except BaseException:
            await conn.close()
            raise
        if self._seen_at is not None:
            self._missed(self._seen_at)
        self._seen_at = time.time()
        return conn

    def _missed(self, since: float) -> None:
        """Notifications may have been lost since `since`: wake everyone to look."""
        self.cancel_requested.set()
        for followers in self._followers.values():
            for wake in followers:
                wake.set()
        for ids in self._everyone:
            ids.put_nowait(Reconnected(since))

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

    @contextlib.contextmanager
    def following_all(self) -> Iterator[asyncio.Queue[str | Reconnected]]:
        """A queue of the rollout id of every notification while the block runs (a rollout
        that stores events in several transactions comes once per transaction), and of
        `Reconnected` after a gap."""
        ids: asyncio.Queue[str | Reconnected] = asyncio.Queue()
        self._everyone.add(ids)
        try:
            yield ids
        finally:
            self._everyone.discard(ids)

    async def _listen(self, url: str, conn: psycopg.AsyncConnection[Any]) -> None:
        while True:
            async with conn:
                try:
                    async for note in conn.notifies():
                        self._seen_at = time.time()
                        if note.channel == self._cancels:
                            self.cancel_requested.set()
                            continue
                        if note.channel == _CHANNEL:
                            for ids in self._everyone:
                                ids.put_nowait(note.payload)
                        for wake in self._followers.get(note.payload, ()):
                            wake.set()
                except psycopg.OperationalError as exc:
                    log.warning(
                        "stopped listening for other servers' events (%s); followers poll "
                        "until it listens again",
                        exc,
                    )
            conn = await self._reconnect(url)

    async def _reconnect(self, url: str) -> psycopg.AsyncConnection[Any]:
        while True:
            await asyncio.sleep(_RECONNECT_S)
            try:
                conn = await self._connect(url)
            except psycopg.Error:
                continue
            log.warning("listening for other servers' events again")
            return conn
