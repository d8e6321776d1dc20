"""Guards around a paid remote sandbox provider: a hard cap on live sandboxes, a create-rate
limit, and bounded retries of transient errors. Nothing here knows the provider's SDK."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

__all__ = ["CreateRateLimiter", "RetryPolicy", "SandboxSlots", "Slot", "retry_transient"]

_log = logging.getLogger(__name__)
T = TypeVar("T")


class Slot:
    """One held place under the cap; `release` gives it back once, later calls do nothing."""

    def __init__(self, semaphore: asyncio.Semaphore) -> None:
        self._semaphore = semaphore
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._semaphore.release()

    def transfer(self) -> Slot:
        """Move the hold to a new owner: this handle stops releasing, the returned one will."""
        if not self._held:
            raise RuntimeError("transfer of a released slot")
        self._held = False
        return Slot(self._semaphore)


class SandboxSlots:
    """A hard cap on live sandboxes. A slot is taken before create and given back after the
    kill, so waiters queue (first come, first served) until a sandbox is gone."""

    def __init__(self, limit: int) -> None:
        self._semaphore = asyncio.Semaphore(max(1, limit))

    async def take(self) -> Slot:
        await self._semaphore.acquire()
        return Slot(self._semaphore)


class CreateRateLimiter:
    """Spaces create calls at least `1 / per_s` seconds apart (0 or less: no limit)."""

    def __init__(self, per_s: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._interval_s = 1.0 / per_s if per_s > 0 else 0.0
        self._clock = clock
        self._next_s = 0.0

    async def wait(self) -> None:
        """Wait for this caller's turn. Turns are reserved in call order."""
        now = self._clock()
        turn = max(now, self._next_s)
        self._next_s = turn + self._interval_s
        if turn > now:
            await asyncio.sleep(turn - now)


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter, within a bounded number of attempts."""

    attempts: int = 5
    """Tries in all, the first included."""
    base_delay_s: float = 0.5
    """Wait after the first failure, before jitter; doubles each time."""
    max_delay_s: float = 8.0
    """Longest wait between two tries, before jitter."""

    def delay_s(self, failures: int) -> float:
        """Wait after `failures` failed tries: half to all of the capped exponential step."""
        step = min(self.max_delay_s, self.base_delay_s * 2.0 ** (failures - 1))
        return step * random.uniform(0.5, 1.0)


async def retry_transient(
    operation: Callable[[], Awaitable[T]],
    *,
    policy: RetryPolicy,
    is_transient: Callable[[Exception], bool],
    what: str,
) -> T:
    """Run `operation`, retrying it while it fails transiently; the last error propagates.

    Errors that are not transient propagate at once; cancellation is never retried.
    """
    failures = 0
    while True:
        try:
            return await operation()
        except Exception as exc:
            failures += 1
            if not is_transient(exc) or failures >= policy.attempts:
                raise
            delay_s = policy.delay_s(failures)
            _log.warning("%s failed (%s); retry %d in %.2fs", what, exc, failures, delay_s)
            await asyncio.sleep(delay_s)
