"""The route gate alone: holds, drains, aborts and retries, policy versions and the lag bound.

Calls here are coroutines the test finishes through futures, so every step is ordered by the
test, never by time.
"""

from __future__ import annotations

import asyncio

import pytest

from service.proxy.capture.gate import Attempt, CallGate


class Call:
    """One call through the gate: each attempt waits for the test to finish it."""

    def __init__(self, gate: CallGate, *, answering: bool = False) -> None:
        self.attempts: list[Attempt] = []
        self.started = asyncio.Event()
        self.finish: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.answering = answering
        self.task = asyncio.ensure_future(gate.run(self._work, lambda: self.answering, self._on))

    def _on(self, attempt: Attempt) -> None:
        self.attempts.append(attempt)

    async def _work(self) -> None:
        self.started.set()
        await asyncio.shield(self.finish)

    def done(self) -> None:
        self.finish.set_result(None)


async def test_a_held_gate_keeps_new_calls_until_its_last_hold_is_lifted() -> None:
    gate = CallGate(version=3)
    assert gate.hold("endpoint")
    assert not gate.hold("labels")  # already held
    call = Call(gate)
    await asyncio.sleep(0)
    assert gate.waiting == 1
    assert not call.started.is_set()
    assert not gate.release("endpoint")  # the label-wide pause still holds it
    assert gate.release("labels")
    await call.started.wait()
    call.done()
    assert await call.task is True
    [attempt] = call.attempts
    assert attempt.version == 3
    assert attempt.waited_s > 0
    assert gate.paused_s() > 0


async def test_drained_waits_for_the_calls_in_flight() -> None:
    gate = CallGate()
    call = Call(gate)
    await call.started.wait()
    gate.hold("pause")
    drained = asyncio.ensure_future(gate.drained())
    await asyncio.sleep(0)
    assert not drained.done()
    call.done()
    await drained
    assert gate.in_flight == 0


async def test_abort_retries_an_unanswered_call_after_release_and_spares_an_answering_one() -> None:
    gate = CallGate(version=1)
    quiet, streaming = Call(gate), Call(gate, answering=True)
    await quiet.started.wait()
    await streaming.started.wait()
    gate.hold("sync")
    assert gate.abort_unanswered() == 1
    streaming.done()
    await gate.drained()  # the aborted call waits at the gate: not in flight
    assert await streaming.task is True
    quiet.started.clear()
    gate.set_version(2)
    gate.release("sync")
    await quiet.started.wait()
    quiet.done()
    assert await quiet.task is True
    assert [a.version for a in quiet.attempts] == [1, 2]


async def test_a_cancel_from_outside_is_never_taken_for_an_abort() -> None:
    gate = CallGate()
    call = Call(gate)
    await call.started.wait()
    call.task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call.task
    assert len(call.attempts) == 1
    assert gate.in_flight == 0


async def test_a_call_beyond_max_lag_is_refused_and_marks_the_gate_stale() -> None:
    gate = CallGate(version=1, max_lag=1)
    first = Call(gate)
    await first.started.wait()
    first.done()
    assert await first.task is True
    gate.set_version(2)
    second = Call(gate)
    await second.started.wait()
    second.done()
    assert await second.task is True  # one behind the oldest (1): within the bound
    gate.set_version(3)
    third = Call(gate)
    assert await third.task is False
    assert not third.started.is_set()
    assert gate.stale.is_set()


class Lease:
    """The rollout's running slot as the gate sees it; `back` lets a reacquire finish."""

    def __init__(self) -> None:
        self.held = True
        self.releases = 0
        self.back = asyncio.Event()
        self.back.set()

    def release(self) -> None:
        if self.held:
            self.held = False
            self.releases += 1

    async def reacquire(self) -> None:
        await self.back.wait()
        self.held = True


async def test_a_gate_lends_the_slot_only_while_every_call_waits_and_takes_it_back_first() -> None:
    gate = CallGate()
    gate.lease = lease = Lease()
    in_flight = Call(gate)
    await in_flight.started.wait()
    gate.hold("pause")
    waiting = Call(gate)
    await asyncio.sleep(0)
    assert lease.held, "the slot was lent while a call was still in flight"
    in_flight.done()
    assert await in_flight.task is True
    assert not lease.held
    assert lease.releases == 1
    lease.back.clear()  # the slot is someone else's for now
    gate.release("pause")
    await asyncio.sleep(0.02)
    assert not waiting.started.is_set(), "a call went on without the slot"
    lease.back.set()
    await waiting.started.wait()
    assert lease.held
    waiting.done()
    assert await waiting.task is True
    assert waiting.attempts[0].waited_s >= 0.02
    assert gate.paused_s() >= 0.02  # the wait for the slot again counts as paused


async def test_a_gate_without_a_lease_or_pause_never_lends_the_slot() -> None:
    gate = CallGate()
    lease = Lease()
    gate.lease = lease
    call = Call(gate)
    await call.started.wait()
    call.done()
    assert await call.task is True
    assert lease.held
    assert lease.releases == 0


async def test_a_gate_held_again_while_its_call_waits_for_the_slot_lends_it_again() -> None:
    gate = CallGate()
    gate.lease = lease = Lease()
    gate.hold("first")
    call = Call(gate)
    await asyncio.sleep(0)
    assert not lease.held
    lease.back.clear()
    gate.release("first")
    await asyncio.sleep(0)  # the call waits for the slot with the gate open
    gate.hold("second")
    lease.back.set()  # the slot comes back to a gate held again
    await asyncio.sleep(0.01)
    assert not call.started.is_set(), "a call went on through a held gate"
    assert not lease.held
    assert lease.releases == 2
    gate.release("second")
    await call.started.wait()
    assert lease.held
    call.done()
    assert await call.task is True
    [attempt] = call.attempts
    assert gate.paused_s() <= attempt.waited_s + 0.005  # no stretch counted twice
