"""The event hub: ordered per-rollout logs, persisted in batches, fanned out to watchers.

Each live rollout's events are kept in memory (`RolloutLog`) until they are persisted
and the rollout is terminal. A watcher is only a cursor into a log, so a slow watcher
costs nothing to the rollout or to other watchers: nobody waits for anybody. Watchers
of finished rollouts read from the store. A watcher that asks for a `Backlog` limit is told,
by its callback from inside `publish`, when more events than that were published since it
started and are not yet handed to it: the API ends its stream then, since a watcher stuck on
a write that never completes (a client that stopped reading) would otherwise never notice.

What stays in memory after a rollout ends is bounded in bytes: its final event carries the
slim rollout (no files, no turns), and label-wide watchers share one feed of recent events
held to a byte budget (`EventFeed`); whatever left memory is read back from the store.
While any label-wide watcher reads, the events other servers sharing the store store join that
feed too (`RolloutStore.follow_others`), so a label-wide watch on one replica sees them all.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, ItemsView, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from service.engine.feed import EventFeed
from service.models import EventPayload, Rollout, RolloutEvent
from service.store import FencedError, RolloutStore

__all__ = ["Backlog", "EventHub", "RolloutLog"]

log = logging.getLogger(__name__)

_REPLAY_PAGE = 500
_FEED_BYTES = 32 * 1024 * 1024
"""Memory the shared feed of recent events may hold (see `EventFeed`)."""


@dataclass(frozen=True)
class Backlog:
    """How far a watcher may fall behind a live log, and whom to tell when it does."""

    limit_events: int
    """Events published since the watcher joined that may wait for it; one more and it is told."""
    on_behind: Callable[[int], None]
    """Called once, from inside `publish`, with the number of events waiting."""


@dataclass(eq=False)
class _Follower:
    """A watcher following a live log with a backlog limit."""

    backlog: Backlog
    joined: int
    """The log's length when it started following: events before it are replay, not backlog."""
    handed: int
    """Index of the next event it will be handed."""

    def waiting(self, head: int) -> int:
        return head - max(self.handed, self.joined)


class RolloutLog:
    """One rollout's events, in order, with a wake-up for its watchers."""

    def __init__(
        self, rollout_id: str, labels: Mapping[str, str], next_seq: int = 1, tenant: str = ""
    ) -> None:
        self.rollout_id = rollout_id
        self.labels = dict(labels)
        self.tenant = tenant
        self.first_seq = next_seq
        self.events: list[RolloutEvent] = []
        self.closed = False
        self._changed = asyncio.Event()
        self._followers: list[_Follower] = []

    def append(self, payload: EventPayload) -> RolloutEvent:
        seq = self.first_seq + len(self.events)
        event = RolloutEvent(
            rollout_id=self.rollout_id,
            seq=seq,
            time=datetime.now(UTC),
            payload=payload,
            labels=self.labels,
            tenant=self.tenant,
        )
        self.events.append(event)
        self.closed = event.is_final
        self._wake()
        if self._followers:
            self._cut_off_laggards()
        return event

    def close(self) -> None:
        """End the log without a final event: its followers return."""
        self.closed = True
        self._wake()

    def _cut_off_laggards(self) -> None:
        head = len(self.events)
        behind = [f for f in self._followers if f.waiting(head) > f.backlog.limit_events]
        for follower in behind:
            self._followers.remove(follower)
            follower.backlog.on_behind(follower.waiting(head))

    def _wake(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def follow(
        self, after_seq: int, backlog: Backlog | None = None
    ) -> AsyncIterator[RolloutEvent]:
        """Events with seq > after_seq, live, until the final event."""
        index = max(0, after_seq + 1 - self.first_seq)
        follower = None
        if backlog is not None:
            follower = _Follower(backlog, joined=len(self.events), handed=index)
            self._followers.append(follower)
        try:
            while True:
                changed = self._changed
                while index < len(self.events):
                    event = self.events[index]
                    index += 1
                    if follower is not None:
                        follower.handed = index
                    yield event
                    if event.is_final:
                        return
                if self.closed:
                    return
                await changed.wait()
        finally:
            if follower in self._followers:
                self._followers.remove(follower)


@dataclass(frozen=True)
class _Wanted:
    """What a label-wide watcher asked for: these labels, of this tenant (None: any)."""

    labels: ItemsView[str, str]
    tenant: str | None

    def matches(self, labels: Mapping[str, str], tenant: str) -> bool:
        return self.labels <= labels.items() and self.tenant in (None, tenant)


class EventHub:
    """Assigns seqs, persists events in batches, and serves watchers."""

    def __init__(self, store: RolloutStore) -> None:
        self._store = store
        self._logs: dict[str, RolloutLog] = {}
        self._pending: list[RolloutEvent] = []
        self._flush_needed = asyncio.Event()
        self._published = 0
        self._persisted = 0
        self._persisted_changed = asyncio.Condition()
        self._writer: asyncio.Task[None] | None = None
        self._feed = EventFeed(_FEED_BYTES)
        self._others: asyncio.Task[None] | None = None
        """Appends other servers' events to the feed while label-wide watchers read it."""
        self._others_readers = 0

    async def start(self) -> None:
        self._writer = asyncio.create_task(self._write_loop(), name="event-writer")

    async def stop(self) -> None:
        """Persist everything pending, then stop the writer."""
        await self.flush()
        if self._writer is not None:
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer

    def open(
        self, rollout_id: str, labels: Mapping[str, str], next_seq: int = 1, *, tenant: str = ""
    ) -> RolloutLog:
        """Start the in-memory log of a live rollout."""
        rollout_log = RolloutLog(rollout_id, labels, next_seq, tenant)
        self._logs[rollout_id] = rollout_log
        return rollout_log

    async def close_interrupted(self, rollout: Rollout) -> None:
        """Append the final event of a rollout a previous server run left unfinished."""
        last_seq = 0
        async for event in self._replay(rollout.id, 0):
            last_seq = event.seq
        self.open(rollout.id, rollout.spec.labels, next_seq=last_seq + 1, tenant=rollout.tenant)
        self.publish(rollout.id, rollout)
        await self.flush()

    def fence(self, rollout_id: str) -> None:
        """Forget a rollout another server took over: its pending events are dropped (the
        store would refuse them) and its live watchers here end; the store has the rest."""
        rollout_log = self._logs.pop(rollout_id, None)
        if rollout_log is not None:
            rollout_log.close()
        kept = [event for event in self._pending if event.rollout_id != rollout_id]
        self._persisted += len(self._pending) - len(kept)  # never stored: `flush` waits not
        self._pending = kept
        self._flush_needed.set()  # the writer wakes `flush`'s waiters

    def publish(self, rollout_id: str, payload: EventPayload) -> RolloutEvent:
        """Append an event to a live rollout's log; never blocks.

        A finished rollout is published as its slim copy: the final event is what outlives
        the run in memory and in the store's event log, and watchers only ever see it slim.
        """
        if isinstance(payload, Rollout):
            payload = payload.slim()
        event = self._logs[rollout_id].append(payload)
        self._pending.append(event)
        self._published += 1
        self._flush_needed.set()
        self._feed.append(event)
        return event

    async def flush(self) -> None:
        """Wait until every event published so far is in the store."""
        target = self._published
        async with self._persisted_changed:
            await self._persisted_changed.wait_for(lambda: self._persisted >= target)

    async def _write_loop(self) -> None:
        while True:
            await self._flush_needed.wait()
            self._flush_needed.clear()
            batch, self._pending = self._pending, []
            if batch:
                try:
                    await self._store.append_events(batch)
                except FencedError as exc:
                    kept = [event for event in batch if event.rollout_id not in exc.ids]
                    log.warning(
                        "dropped %d events of rollouts another server took over: %s",
                        len(batch) - len(kept),
                        ", ".join(sorted(exc.ids)),
                    )
                    self._pending[:0] = kept
                    self._persisted += len(batch) - len(kept)
                    self._flush_needed.set()
                    continue
                except Exception:
                    log.exception("persisting %d events failed; they stay in memory", len(batch))
                    self._pending[:0] = batch
                    await asyncio.sleep(0.5)
                    self._flush_needed.set()
                    continue
                self._evict_finished(batch)
            async with self._persisted_changed:
                self._persisted += len(batch)
                self._persisted_changed.notify_all()

    def _evict_finished(self, batch: list[RolloutEvent]) -> None:
        for event in batch:
            if event.is_final:
                self._logs.pop(event.rollout_id, None)

    def live_log(self, rollout_id: str) -> RolloutLog | None:
        return self._logs.get(rollout_id)

    async def watch(
        self, rollout_id: str, after_seq: int, backlog: Backlog | None = None
    ) -> AsyncIterator[RolloutEvent]:
        """One rollout's events after `after_seq`: from memory while live, else the store.
        With a `backlog`, it bounds how far the watcher may fall behind the live log."""
        rollout_log = self._logs.get(rollout_id)
        if rollout_log is not None and rollout_log.first_seq <= after_seq + 1:
            async for event in rollout_log.follow(after_seq, backlog):
                yield event
            return
        async for event in self._replay(rollout_id, after_seq):
            after_seq = event.seq
            yield event
            if event.is_final:
                return
        rollout_log = self._logs.get(rollout_id)
        if rollout_log is not None:
            async for event in rollout_log.follow(after_seq, backlog):
                yield event
            return
        # Not live here: another server sharing the store may be running it.
        async for event in self._store.follow_events(rollout_id, after_seq=after_seq):
            yield event

    async def _replay(self, rollout_id: str, after_seq: int) -> AsyncIterator[RolloutEvent]:
        while True:
            page = await self._store.events(rollout_id, after_seq=after_seq, limit=_REPLAY_PAGE)
            for event in page:
                yield event
            if len(page) < _REPLAY_PAGE:
                return
            after_seq = page[-1].seq

    async def watch_all(
        self, labels: Mapping[str, str], *, tenant: str | None = None
    ) -> AsyncIterator[RolloutEvent]:
        """Every rollout's live events whose labels include `labels`, of `tenant` (None: of
        every tenant). Runs until cancelled.

        A watcher that falls further behind than the shared feed holds catches up per
        rollout from the store, so it loses nothing and delays nobody.
        """
        wanted = _Wanted(dict(labels).items(), tenant)
        feed = self._feed
        cursor = feed.end
        last_seq: dict[str, int] = {}
        with feed.reading(), self._others_in_feed():
            while True:
                changed = feed.changed
                while cursor < feed.end:
                    if cursor < feed.start:
                        async for event in self._catch_up(last_seq, wanted, since=cursor):
                            yield event
                        cursor = feed.start
                        continue
                    event = feed.at(cursor)
                    cursor += 1
                    if wanted.matches(event.labels, event.tenant) and event.seq > last_seq.get(
                        event.rollout_id, 0
                    ):
                        last_seq[event.rollout_id] = event.seq
                        yield event
                await changed.wait()

    @contextlib.contextmanager
    def _others_in_feed(self) -> Iterator[None]:
        """Feed other servers' events while the block runs (the first reader starts, the last
        one stops)."""
        if self._others is None or self._others.done():
            self._others = asyncio.create_task(self._feed_others(), name="feed-others")
        self._others_readers += 1
        try:
            yield
        finally:
            self._others_readers -= 1
            if not self._others_readers and self._others is not None:
                self._others.cancel()
                self._others = None

    async def _feed_others(self) -> None:
        try:
            async for event in self._store.follow_others():
                self._feed.append(event)
        except Exception:  # the next label-wide watcher to start tries again
            log.exception("following other servers' events failed")

    async def _catch_up(
        self, last_seq: dict[str, int], wanted: _Wanted, *, since: int
    ) -> AsyncIterator[RolloutEvent]:
        """Replay from the store every matching rollout with events after feed position `since`:
        those already followed, those still live, and those that ended meanwhile."""
        await self.flush()
        live = [
            log_.rollout_id
            for log_ in self._logs.values()
            if wanted.matches(log_.labels, log_.tenant)
        ]
        ended = [
            rid
            for rid, labels, tenant in self._feed.ended_since(since)
            if wanted.matches(labels, tenant)
        ]
        for rollout_id in dict.fromkeys([*last_seq, *live, *ended]):
            async for event in self._replay(rollout_id, last_seq.get(rollout_id, 0)):
                last_seq[rollout_id] = event.seq
                yield event
