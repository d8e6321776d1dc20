"""Admission: the server's places, who takes one, and its running slots.

A server holds at most `capacity` rollouts (`max_running` running + `max_queued` queued).
Every live rollout holds a place from its start until it has settled (`hold`, `free`);
groups and sessions reserve places for the members they have not started yet (`reserve`,
`release`). Places are counted, and taken, only inside `admitting`, which one caller holds
at a time, so what it found free is still free when it takes it. When they are not,
CapacityError: RESOURCE_EXHAUSTED with RetryInfo at the API. Once `close`d (shutdown),
every admission is ShuttingDownError.

Of the places held, `max_running` at most run at once: a rollout waits for a running slot
(`slot`, its QUEUED phase) after it was admitted, never at admission.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from service.config import Settings
from service.errors import CapacityError, ShuttingDownError
from service.telemetry import Metrics

__all__ = ["Admission"]


class Admission:
    """One server's places and running slots, shared by rollouts, groups and sessions."""

    def __init__(self, settings: Settings, metrics: Metrics) -> None:
        self._max_running = settings.max_running
        self._max_queued = settings.max_queued
        self._metrics = metrics
        self._lock = asyncio.Lock()
        self._slots = asyncio.Semaphore(settings.max_running)
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
    async def slot(self) -> AsyncIterator[None]:
        """One running slot, held for the body (the run's `Slot`)."""
        with self._metrics.in_queue():
            await self._slots.acquire()
        try:
            with self._metrics.in_slot():
                yield
        finally:
            self._slots.release()

    async def close(self) -> None:
        """Stop admitting: an admission under way finishes first; none starts after it."""
        self._open = False
        async with self._lock:
            pass
