"""A route's gate: pausing its model calls, and the policy version each call runs under.

A trainer updating weights pauses the calls of the rollouts on an endpoint
(`engine.model_calls`), lets the calls in flight finish (or aborts them), loads the weights,
sets the policy version and resumes. What the gate does with a call, by state:

    gate        a new call                        a call in flight
    open        goes upstream at once             runs
    held        waits here, off the agent's       runs; `drained()` waits for it
                clock (`paused_s`)
    aborting    waits here                        not yet answering the agent: cancelled,
                                                  and sent again once the gate opens (the
                                                  agent sees one slow answer; only the
                                                  retry becomes a turn)
                                                  answering (streaming): runs to its end,
                                                  since no retry could be invisible

A gate may be held by several pauses at once (an endpoint-wide and a label-wide one); it opens
when the last is lifted. Versions only move forward. With a `max_lag`, a call that would start
more than `max_lag` versions after the oldest version the route used is not sent: `stale` is
set, and the rollout ends POLICY_STALE (`engine.lifecycle`).

While the gate is held and no call is in flight but some wait, the agent can do nothing but
wait: the gate gives the rollout's running slot back (`lease`, `engine.admission`), so a
queued rollout may run meanwhile. Once the gate opens, a waiting call takes a slot again
before it goes on; that wait is counted as paused too (`paused_s`), as the pause caused it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

__all__ = ["Attempt", "CallGate", "SlotLease"]

Answering = Callable[[], bool]
"""Whether a call has begun answering the agent (then it cannot be retried invisibly)."""


class SlotLease(Protocol):
    """The rollout's running slot, given back while its calls are all paused."""

    @property
    def held(self) -> bool: ...

    def release(self) -> None:
        """Give the slot back (a no-op unless held)."""

    async def reacquire(self) -> None:
        """Return holding the slot again."""


class Attempt:
    """One try of a call through the gate: the version it started under, the time it waited."""

    def __init__(self, version: int | None, waited_s: float) -> None:
        self.version = version
        self.waited_s = waited_s


class CallGate:
    """One route's pause state, calls in flight and policy version."""

    def __init__(self, *, version: int | None = None, max_lag: int | None = None) -> None:
        self.version = version
        """The policy version the endpoint serves now (None: never set)."""
        self.max_lag = max_lag
        self.oldest: int | None = None
        """The oldest version a call of this route started under."""
        self.stale = asyncio.Event()
        """Set when a call was refused for starting beyond `max_lag`."""
        self._holds: set[object] = set()
        self._open = asyncio.Event()
        self._open.set()
        self._paused_since: float | None = None
        self._paused_total_s = 0.0
        self.waiting = 0
        """Calls waiting at the gate now."""
        self._in_flight: dict[asyncio.Task[None], Answering] = {}
        self._idle = asyncio.Event()
        self._idle.set()
        self._aborted: set[asyncio.Task[None]] = set()
        self.lease: SlotLease | None = None
        """The rollout's running slot while its agent runs (None: not the gate's to give)."""
        self._taking = 0

    @property
    def held(self) -> bool:
        return bool(self._holds)

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def paused_s(self) -> float:
        """Seconds this gate has been held, the current hold included, and open while its
        calls waited to take the running slot back."""
        since = self._paused_since
        return self._paused_total_s + (0.0 if since is None else time.monotonic() - since)

    def _count_paused(self) -> None:
        """Open or close the current paused interval: held, or calls taking the slot back."""
        paused = bool(self._holds) or self._taking > 0
        if paused and self._paused_since is None:
            self._paused_since = time.monotonic()
        elif not paused and self._paused_since is not None:
            self._paused_total_s += time.monotonic() - self._paused_since
            self._paused_since = None

    def hold(self, pause: object) -> bool:
        """Hold new calls for `pause`; True when this closed an open gate."""
        closing = not self._holds
        self._holds.add(pause)
        if closing:
            self._open.clear()
            self._count_paused()
        return closing

    def held_by(self, pause: object) -> bool:
        return pause in self._holds

    def release(self, pause: object) -> bool:
        """Lift `pause`; True when this opened the gate (the waiting calls go on)."""
        if pause not in self._holds:
            return False
        self._holds.discard(pause)
        if self._holds:
            return False
        self._open.set()
        self._count_paused()
        return True

    def set_version(self, version: int) -> None:
        self.version = version

    async def drained(self) -> None:
        """Return once no call is in flight (call after `hold`: none can start meanwhile)."""
        await self._idle.wait()

    def abort_unanswered(self) -> int:
        """Cancel the calls in flight that have not begun answering the agent, to be retried
        once the gate opens; the number cancelled."""
        aborted = 0
        for task, answering in list(self._in_flight.items()):
            if not answering() and task not in self._aborted:
                self._aborted.add(task)
                task.cancel()
                aborted += 1
        return aborted

    async def run(
        self,
        work: Callable[[], Awaitable[None]],
        answering: Answering,
        on_attempt: Callable[[Attempt], None],
    ) -> bool:
        """Run `work` once the gate is open, again after each abort; False (and `work`
        never run) when the call would start beyond `max_lag`."""
        while True:
            attempt = await self._admit()
            if attempt is None:
                return False
            on_attempt(attempt)
            task: asyncio.Task[None] = asyncio.ensure_future(work())
            self._in_flight[task] = answering
            self._idle.clear()
            try:
                await task
                return True
            except asyncio.CancelledError:
                this = asyncio.current_task()
                if task not in self._aborted or (this is not None and this.cancelling()):
                    raise
            finally:
                self._in_flight.pop(task, None)
                self._aborted.discard(task)
                if not self._in_flight:
                    self._idle.set()
                    if self.waiting:
                        self._lend_slot()

    async def _admit(self) -> Attempt | None:
        began = time.monotonic()
        self.waiting += 1
        try:
            while True:
                while not self._open.is_set():
                    self._lend_slot()
                    await self._open.wait()
                await self._take_slot()
                if self._open.is_set():  # not held again while it waited for the slot
                    break
        finally:
            self.waiting -= 1
        version = self.version
        if version is not None and self._beyond_lag(version):
            self.stale.set()
            return None
        if version is not None:
            self.oldest = version if self.oldest is None else min(self.oldest, version)
        return Attempt(version, time.monotonic() - began)

    def _lend_slot(self) -> None:
        """Give the running slot back while every call of the route waits at the held gate."""
        if self.lease is not None and self._holds and not self._in_flight:
            self.lease.release()

    async def _take_slot(self) -> None:
        """Hold the running slot again before a call goes on (at once if the gate kept it)."""
        lease = self.lease
        if lease is None or lease.held:
            return
        self._taking += 1
        self._count_paused()
        try:
            await lease.reacquire()
        finally:
            self._taking -= 1
            self._count_paused()

    def _beyond_lag(self, version: int) -> bool:
        return (
            self.oldest is not None
            and self.max_lag is not None
            and version - self.oldest > self.max_lag
        )
