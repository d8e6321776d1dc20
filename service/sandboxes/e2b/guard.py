"""Guards around a paid remote sandbox provider: a hard cap on live sandboxes, a create-rate
limit, and bounded retries of transient errors. Nothing here knows the provider's SDK."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

__all__ = ["CreateRateLimiter", "RetryPolicy", "SandboxSlots", "Slot", "retry_transient"]

_log = logging.getLogger(__name__)
T = TypeVar("T")


class Slot:
    """One held place under the cap; `release` gives it back once, later calls do nothing."""

    def __init__(self, give_back: Callable[[], None]) -> None:
        self._give_back = give_back
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._give_back()

    def transfer(self) -> Slot:
        """Move the hold to a new owner: this handle stops releasing, the returned one will."""
        if not self._held:
            raise RuntimeError("transfer of a released slot")
        self._held = False
        return Slot(self._give_back)


class SandboxSlots:
    """A hard cap on live sandboxes. A slot is taken before create and given back after the
    kill, so waiters queue (first come, first served) until a sandbox is gone.

    A rollout verified FRESH holds its sandbox while it asks for its verifier's: were every
    place held by such rollouts, each would wait for another's to end, forever. So their
    first sandboxes (`take(keep_one=True)`) never take the last place, and a waiter that
    cannot have one yet lets later ones that can go first: the last place only ever goes to
    a sandbox that asks for no other (a verifier's, one verified in place), which ends.
    A cap of 1 leaves no room for a verifier's sandbox at all (`E2BBackend.can_carry`)."""

    def __init__(self, limit: int) -> None:
        self._limit = max(1, limit)
        self._taken = 0
        self._waiting: deque[tuple[asyncio.Future[None], int]] = deque()
        """Each waiter, in arrival order, with how many places it must leave free."""

    async def take(self, *, keep_one: bool = False) -> Slot:
        waiter = asyncio.get_running_loop().create_future()
        entry = (waiter, 1 if keep_one else 0)
        self._waiting.append(entry)
        self._grant()
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._give_back()  # granted as its taker was cancelled
            elif entry in self._waiting:
                self._waiting.remove(entry)
            raise
        return Slot(self._give_back)

    def _give_back(self) -> None:
        self._taken -= 1
        self._grant()

    def _grant(self) -> None:
        for entry in list(self._waiting):
            waiter, keep = entry
            if waiter.done():
                self._waiting.remove(entry)
            elif self._taken + keep < self._limit:
                self._waiting.remove(entry)
                self._taken += 1
                waiter.set_result(None)


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
