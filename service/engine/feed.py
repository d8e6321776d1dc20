"""The shared feed of recent events that label-wide watchers read, bounded in bytes.

Events are measured once, by the size of their JSON, plus a fixed allowance for the objects
that hold them. The oldest events leave once the feed holds more than its budget; a watcher
whose cursor they passed catches up from the store, so the budget costs nothing but speed.
For that the feed also remembers where each rollout ended (a few bytes each, for many more
rollouts than it holds events of): a rollout that began and ended while a watcher was behind
is found there, not lost.

A watcher starts reading at the feed's end, so the feed keeps nothing while nobody reads it:
held events cost about 30 KB of objects per no-op rollout, far more than their JSON, and are
worth it only while a label-wide watcher exists.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import pydantic_core

from service.models import RolloutEvent

__all__ = ["EventFeed", "event_bytes"]

_EVENT_OVERHEAD_BYTES = 512
"""What an event costs in memory beyond its JSON: its objects, its labels, the deque slot."""
_ENDINGS_KEPT = 100_000
"""Rollout endings remembered for watchers that fell behind (about 200 bytes each)."""


def event_bytes(event: RolloutEvent) -> int:
    """What keeping `event` in memory costs, roughly: its JSON size and a fixed overhead."""
    return len(pydantic_core.to_json(event.payload, bytes_mode="base64")) + _EVENT_OVERHEAD_BYTES


class EventFeed:
    """Recent events with absolute positions; the newest always stays, whatever its size."""

    def __init__(self, budget_bytes: int) -> None:
        self._budget_bytes = budget_bytes
        self._events: deque[tuple[RolloutEvent, int]] = deque()
        self.held_bytes = 0
        self.end = 0
        """The position after the newest event (positions count every event ever appended)."""
        self._changed = asyncio.Event()
        self._endings: deque[tuple[int, str, Mapping[str, str], str]] = deque(maxlen=_ENDINGS_KEPT)
        self._readers = 0

    @property
    def start(self) -> int:
        """The position of the oldest event still held."""
        return self.end - len(self._events)

    @property
    def changed(self) -> asyncio.Event:
        """Set at the next append (take it before reading, then wait on it)."""
        return self._changed

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Hold events while the caller reads (from `end` on); the last reader out empties
        the feed."""
        self._readers += 1
        try:
            yield
        finally:
            self._readers -= 1
            if not self._readers:
                self._events.clear()
                self._endings.clear()
                self.held_bytes = 0

    def append(self, event: RolloutEvent) -> None:
        if not self._readers:
            self.end += 1
            return
        size = event_bytes(event)
        if event.is_final:
            self._endings.append((self.end, event.rollout_id, event.labels, event.tenant))
        self._events.append((event, size))
        self.held_bytes += size
        self.end += 1
        while self.held_bytes > self._budget_bytes and len(self._events) > 1:
            _, dropped = self._events.popleft()
            self.held_bytes -= dropped
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def at(self, position: int) -> RolloutEvent:
        """The event at `position` (start <= position < end); cheap near the newest end."""
        return self._events[position - self.start][0]

    def ended_since(self, position: int) -> list[tuple[str, Mapping[str, str], str]]:
        """(rollout id, labels, tenant) of the rollouts whose final event is at `position` or
        later."""
        return [
            (rid, labels, tenant) for at, rid, labels, tenant in self._endings if at >= position
        ]
