"""One build per key at a time: concurrent requests for the same image share one build.

The first request for a key starts the work; the others wait for the same result and see
its progress too (each through its own callback, told first that they joined a build under
way). The work is shielded: one waiter cancelled does not cancel the build for the others.
Across processes, a file lock per key in the store keeps two servers on one cache apart.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from service.images.models import ImageProgress, ProgressCallback

__all__ = ["Flights"]

T = TypeVar("T")


class _Flight(Generic[T]):
    def __init__(self) -> None:
        self.listeners: list[ProgressCallback] = []
        self.task: asyncio.Task[T] | None = None

    def report(self, progress: ImageProgress) -> None:
        for listener in list(self.listeners):
            listener(progress)


class Flights(Generic[T]):
    """Runs `work(report)` once per key among concurrent callers."""

    def __init__(self) -> None:
        self._flights: dict[str, _Flight[T]] = {}

    async def run(
        self,
        key: str,
        image: str,
        work: Callable[[ProgressCallback], Awaitable[T]],
        on_progress: ProgressCallback,
    ) -> T:
        flight = self._flights.get(key)
        if flight is None:
            flight = self._flights[key] = _Flight()
            flight.task = asyncio.ensure_future(self._fly(key, flight, work))
        else:
            on_progress(ImageProgress(image=image, step="wait", message="joined a build under way"))
        flight.listeners.append(on_progress)
        assert flight.task is not None
        try:
            return await asyncio.shield(flight.task)
        finally:
            flight.listeners.remove(on_progress)

    async def _fly(
        self, key: str, flight: _Flight[T], work: Callable[[ProgressCallback], Awaitable[T]]
    ) -> T:
        try:
            return await work(flight.report)
        finally:
            self._flights.pop(key, None)
