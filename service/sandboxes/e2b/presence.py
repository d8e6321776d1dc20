"""Which of a backend's sandboxes still exist: one listing a round for all of them.

A running command ends with its stream, but a sandbox can vanish (E2B's timeout, a lost host)
without closing its streams, which would then wait forever. A probe of each waiting command's
envd every round would be one request per live command per round, most of a replica's CPU at
thousands of rollouts. So, while any command waits, one task lists the backend's
sandboxes (E2B's list API, `PAGE` a page) every round and wakes the waiters of a sandbox missing
from `GONE_AFTER_MISSES` consecutive listings that began after they started waiting. A listing
that fails says nothing about any sandbox: it is logged, and the next round lists again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

__all__ = ["GONE_AFTER_MISSES", "PAGE", "Presence"]

log = logging.getLogger(__name__)

GONE_AFTER_MISSES = 2
"""Consecutive listings without a sandbox after which it counts as gone (not one: a listing
paged while sandboxes come and go may skip one)."""
PAGE = 100
"""Sandboxes per page of a listing: E2B's largest."""

ListExisting = Callable[[], Awaitable[set[str]]]
"""The ids of the backend's sandboxes that exist now; raises on failure."""


@dataclass
class _Watch:
    since: int
    """The round under way when the first waiter came: listings from before do not count."""
    waiters: int = 0
    misses: int = 0
    gone: asyncio.Event = field(default_factory=asyncio.Event)


class Presence:
    """Wakes the waiters of sandboxes that are gone, from one listing every `interval_s`."""

    def __init__(self, list_existing: ListExisting, interval_s: float) -> None:
        self._list = list_existing
        self._interval_s = interval_s
        self._watches: dict[str, _Watch] = {}
        self._round = 0
        self._task: asyncio.Task[None] | None = None

    async def until_gone(self, sandbox_id: str) -> None:
        """Return once listings say the sandbox is gone."""
        watch = self._watches.get(sandbox_id)
        if watch is None:
            watch = self._watches[sandbox_id] = _Watch(self._round)
        watch.waiters += 1
        if self._task is None:
            self._task = asyncio.create_task(self._rounds(), name="e2b-presence")
        try:
            await watch.gone.wait()
        finally:
            watch.waiters -= 1
            if not watch.waiters:
                self._watches.pop(sandbox_id, None)

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _rounds(self) -> None:
        try:
            while self._watches:
                await asyncio.sleep(self._interval_s)
                if not self._watches:
                    break
                self._round += 1
                listed_in = self._round
                try:
                    existing = await self._list()
                except Exception:
                    log.exception("could not list E2B sandboxes to see which still exist")
                    continue
                for sandbox_id, watch in self._watches.items():
                    if watch.since >= listed_in or watch.gone.is_set():
                        continue
                    watch.misses = 0 if sandbox_id in existing else watch.misses + 1
                    if watch.misses >= GONE_AFTER_MISSES:
                        watch.gone.set()
        finally:
            self._task = None
