"""Admission: the server's places, who takes one, and its running slots.

A server holds at most `capacity` rollouts (`max_running` running + `max_queued` queued).
Every live rollout holds a place from its start until it has settled (`hold`, `free`);
groups and sessions reserve places for the members they have not started yet (`reserve`,
`release`). Places are counted, and taken, only inside `admitting`, which one caller holds
at a time, so what it found free is still free when it takes it. When they are not,
CapacityError: RESOURCE_EXHAUSTED with RetryInfo at the API. Once `close`d (shutdown),
every admission is ShuttingDownError.

Of the places held, `max_running` at most run at once: a rollout waits for a running slot
(`slot`, its QUEUED phase) after it was admitted, never at admission. A running rollout whose
model calls are all held by a pause gives its slot back for the while (`RunningSlot.release`)
and takes one again before its call goes on (`RunningSlot.reacquire`), ahead of the rollouts
that never started. Its place it keeps: live sandboxes stay bounded by `capacity`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncIterator

from service.config import Settings
from service.errors import CapacityError, ShuttingDownError
from service.telemetry import Metrics

__all__ = ["Admission", "RunningSlot"]


class _Slots:
    """`count` running slots, handed out first to rollouts taking theirs back (`returning`),
    then in arrival order: a paused rollout that gave its slot away waits for one slot to
    free, not for every rollout queued meanwhile. A free slot implies nobody waits: `release`
    hands a slot straight to the first waiter."""

    def __init__(self, count: int) -> None:
        self._free = count
        self._returning: collections.deque[asyncio.Future[None]] = collections.deque()
        self._fresh: collections.deque[asyncio.Future[None]] = collections.deque()

    async def acquire(self, *, returning: bool = False) -> None:
        if self._free > 0:
            self._free -= 1
            return
        waiters = self._returning if returning else self._fresh
        handed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters.append(handed)
        try:
            await handed
        except asyncio.CancelledError:
            if handed.done() and not handed.cancelled():
                self.release()  # handed over just as the waiter was cancelled: pass it on
            else:
                with contextlib.suppress(ValueError):
                    waiters.remove(handed)
            raise

    def release(self) -> None:
        for waiters in (self._returning, self._fresh):
            while waiters:
                handed = waiters.popleft()
                if not handed.done():
                    handed.set_result(None)
                    return
        self._free += 1


class RunningSlot:
    """One rollout's running slot, which it may give back for a while and take again.

    A rollout whose model calls are all held by a pause can do nothing but wait, so it gives
    its slot to a queued rollout (of any tenant) rather than holding the others' capacity for
    as long as the pause; its sandbox, and its place, it keeps. `held` is the one truth of
    whether it holds a slot, changed only between awaits, so a slot is never given back twice
    nor kept by a rollout that ended: `release` is a no-op unless held, `reacquire` a no-op
    if held (callers, several calls of one rollout among them, take it again one at a time),
    and once `close`d (the rollout's slot body ended) a slot taken meanwhile is given back.
    """

    def __init__(self, admission: Admission, metrics: Metrics) -> None:
        self._admission = admission
        self._metrics = metrics
        self._held = True
        self._closed = False
        self._taking = asyncio.Lock()
        metrics.slot_running(1)

    @property
    def held(self) -> bool:
        return self._held

    def release(self) -> None:
        """Give the slot back (a no-op unless held)."""
        if self._held and not self._closed:
            self._held = False
            self._metrics.slot_running(-1)
            self._admission.release_slot()

    async def reacquire(self) -> None:
        """Return holding the slot again (at once if held, or once closed: never blocks the
        rollout's end); waiting for it is cancellable without losing a slot."""
        async with self._taking:
            if self._held or self._closed:
                return
            await self._admission.reacquire_slot()
            if self._closed:  # the rollout ended while this waited
                self._admission.release_slot()
                return
            self._held = True
            self._metrics.slot_running(1)

    def close(self) -> None:
        """The rollout is done with its slot: give it back if held; take none after."""
        if self._closed:
            return
        self._closed = True
        if self._held:
            self._held = False
            self._metrics.slot_running(-1)
            self._admission.release_slot()


class Admission:
    """One server's places and running slots, shared by rollouts, groups and sessions."""

    def __init__(self, settings: Settings, metrics: Metrics) -> None:
        self._max_running = settings.max_running
        self._max_queued = settings.max_queued
        self._metrics = metrics
        self._lock = asyncio.Lock()
        self._slots = _Slots(settings.max_running)
        self._open = True
        self._held = 0
        """Places live rollouts hold."""
        self._reserved = 0
        """Places admitted groups and sessions hold for members they have not started yet."""
        metrics.set_capacity(self.capacity)

    @property
    def capacity(self) -> int:
        """Rollouts this server holds at most, running and queued."""
        return self._max_running + self._max_queued

    def check_open(self) -> None:
        """ShuttingDownError once the server has stopped admitting."""
        if not self._open:
            raise ShuttingDownError("the server is shutting down")

    @contextlib.asynccontextmanager
    async def admitting(self) -> AsyncIterator[None]:
        """Hold admission for the body (ShuttingDownError if closed, also while waiting for
        it): nobody else takes a place meanwhile."""
        async with self._lock:
            self.check_open()
            yield

    def check_room(self) -> None:
        """CapacityError unless one more rollout fits (call while `admitting`)."""
        if self._held + self._reserved >= self.capacity:
            raise CapacityError(
                f"{self._held} rollouts running or queued; the limit is "
                f"{self._max_running} running + {self._max_queued} queued"
            )

    @contextlib.asynccontextmanager
    async def admitting_unit(
        self, places: int, *, running: bool = False, what: str = "the group"
    ) -> AsyncIterator[None]:
        """Hold admission to admit `places` rollouts as a unit (a group's members; with
        `running`, sessions, which never queue: running slots free now): CapacityError naming
        the places when they do not all fit now. The body `reserve`s them if it admits it."""
        async with self.admitting():
            limit = self._max_running if running else self.capacity
            free = max(0, limit - self._held - self._reserved)
            if places > free:
                raise CapacityError(
                    f"{what} needs {places} slots and {free} are free "
                    f"({self._held} rollouts running or queued, {self._reserved} reserved; "
                    f"limit {limit}{' running' if running else ''})"
                )
            yield

    def hold(self) -> None:
        """A rollout started: it holds its own place until `free`."""
        self._held += 1
        self._metrics.hold_places(1)

    def free(self) -> None:
        """A rollout settled: its place is free."""
        self._held -= 1
        self._metrics.hold_places(-1)

    def reserve(self, places: int) -> None:
        """Hold places for a unit's members until they start (call while `admitting`)."""
        self._reserved += places
        self._metrics.hold_places(places)

    def release(self, places: int) -> None:
        """Give back reserved places (the members now hold their own, or never will)."""
        self._reserved -= places
        self._metrics.hold_places(-places)

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[RunningSlot]:
        """One running slot, held for the body (the run's `Slot`) unless the body gives it
        back for a while through the `RunningSlot` it gets."""
        with self._metrics.in_queue():
            await self._slots.acquire()
        lease = RunningSlot(self, self._metrics)
        try:
            yield lease
        finally:
            lease.close()

    def release_slot(self) -> None:
        """Give back a slot a `slot` body holds before the body ends. Only `RunningSlot`
        calls it, which makes sure it is given back once: a rollout waiting out a pause lets
        a queued one run meanwhile."""
        self._slots.release()

    async def reacquire_slot(self) -> None:
        """Take a slot again after `release_slot`, ahead of the rollouts never started (the
        returning rollout's sandbox and agent are already there); cancellable, losing none."""
        with self._metrics.in_queue():
            await self._slots.acquire(returning=True)

    async def close(self) -> None:
        """Stop admitting: an admission under way finishes first; none starts after it."""
        self._open = False
        async with self._lock:
            pass
