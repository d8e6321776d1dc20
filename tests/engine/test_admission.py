"""Admission's places in memory: what fits, what a reservation holds, and its close; and
its running slots: one lent while a rollout is paused, taken again, never lost."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import NamedTuple

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from service.config import Settings
from service.engine.admission import Admission, RunningSlot
from service.errors import CapacityError, ShuttingDownError
from service.telemetry.metrics import Metrics
from tests.telemetry.test_metrics import points


def _admission(max_running: int = 2, max_queued: int = 1) -> Admission:
    return Admission(Settings(max_running=max_running, max_queued=max_queued), Metrics())


async def test_a_lone_rollout_fits_until_running_and_queued_places_are_held() -> None:
    admission = _admission()
    for _ in range(admission.capacity):
        async with admission.admitting():
            admission.check_room()
            admission.hold()
    async with admission.admitting():
        with pytest.raises(CapacityError, match="3 rollouts running or queued; the limit is 2"):
            admission.check_room()
    admission.free()
    async with admission.admitting():
        admission.check_room()


async def test_reserved_places_count_against_a_lone_rollout_until_released() -> None:
    admission = _admission()
    async with admission.admitting_unit(3):
        admission.reserve(3)
    async with admission.admitting():
        with pytest.raises(CapacityError):
            admission.check_room()
    admission.release(1)
    async with admission.admitting():
        admission.check_room()


async def test_a_unit_is_admitted_whole_or_refused_naming_its_places() -> None:
    admission = _admission()
    admission.hold()
    with pytest.raises(CapacityError, match=r"the group needs 3 slots and 2 are free"):
        async with admission.admitting_unit(3):
            raise AssertionError("admitted beyond the capacity")
    with pytest.raises(CapacityError, match=r"2 sessions needs 2 slots and 1 are free .*running"):
        async with admission.admitting_unit(2, running=True, what="2 sessions"):
            raise AssertionError("sessions admitted beyond the running slots")


class _Holder:
    """Tasks that each enter a context and stay in it until `leave` is set."""

    def __init__(self, enter: Callable[[], AbstractAsyncContextManager[object]]) -> None:
        self._enter = enter
        self.inside = asyncio.Event()
        self.leave = asyncio.Event()

    def start(self) -> asyncio.Task[None]:
        return asyncio.create_task(self._hold())

    async def _hold(self) -> None:
        async with self._enter():
            self.inside.set()
            await self.leave.wait()


async def test_at_most_max_running_hold_a_slot_at_once() -> None:
    holder = _Holder(_admission(max_running=1).slot)
    first = holder.start()
    await holder.inside.wait()
    holder.inside.clear()
    second = holder.start()
    await asyncio.sleep(0.01)
    assert not holder.inside.is_set(), "a second rollout ran beside the only slot's holder"
    holder.leave.set()
    await asyncio.wait_for(asyncio.gather(first, second), 5)
    assert holder.inside.is_set()


async def test_a_closed_admission_refuses_even_a_caller_already_waiting() -> None:
    admission = _admission()
    holder = _Holder(admission.admitting)
    under_way = holder.start()
    await holder.inside.wait()
    waiting = holder.start()
    closing = asyncio.create_task(admission.close())
    await asyncio.sleep(0.01)
    assert not closing.done(), "close did not wait for the admission under way"
    holder.leave.set()
    await asyncio.wait_for(closing, 5)
    await under_way
    with pytest.raises(ShuttingDownError):
        await waiting
    with pytest.raises(ShuttingDownError):
        admission.check_open()


async def _running(admission: Admission) -> tuple[asyncio.Task[None], RunningSlot, asyncio.Event]:
    """A rollout in its slot until the returned event is set, and its lease."""
    leases: asyncio.Queue[RunningSlot] = asyncio.Queue()
    leave = asyncio.Event()

    async def hold() -> None:
        async with admission.slot() as lease:
            leases.put_nowait(lease)
            await leave.wait()

    task = asyncio.create_task(hold())
    return task, await asyncio.wait_for(leases.get(), 5), leave


async def _gets_a_slot(admission: Admission) -> bool:
    """Whether a new rollout gets a running slot now (it gives it back at once)."""
    try:
        async with asyncio.timeout(0.05), admission.slot():
            return True
    except TimeoutError:
        return False


class _Lent(NamedTuple):
    """A paused rollout that lent its only slot to another, and now waits to take it back."""

    admission: Admission
    paused: asyncio.Task[None]
    lease: RunningSlot
    leave_paused: asyncio.Event
    other: asyncio.Task[None]
    other_lease: RunningSlot
    leave_other: asyncio.Event
    waiting: asyncio.Task[None]


async def _lent_and_waited_for() -> _Lent:
    admission = _admission(max_running=1)
    paused, lease, leave_paused = await _running(admission)
    lease.release()
    other, other_lease, leave_other = await _running(admission)
    waiting = asyncio.create_task(lease.reacquire())
    await asyncio.sleep(0)
    return _Lent(admission, paused, lease, leave_paused, other, other_lease, leave_other, waiting)


async def test_a_slot_given_back_runs_a_queued_rollout_and_comes_back_before_new_ones() -> None:
    admission = _admission(max_running=1)
    paused, lease, leave_paused = await _running(admission)
    assert not await _gets_a_slot(admission)
    lease.release()
    lease.release()  # a second release gives nothing more back
    queued, _, leave_queued = await _running(admission)  # runs in the slot given back
    assert not await _gets_a_slot(admission), "one release made two slots"
    returning = asyncio.create_task(lease.reacquire())
    await asyncio.sleep(0)
    fresh = asyncio.create_task(_gets_a_slot(admission))  # queued after the returning one
    fresh_order: list[str] = []
    returning.add_done_callback(lambda _: fresh_order.append("returning"))
    leave_queued.set()
    await asyncio.wait_for(returning, 5)
    assert lease.held
    assert fresh_order == ["returning"]
    assert not await fresh, "a never-started rollout went before the returning one"
    leave_paused.set()
    await asyncio.wait_for(asyncio.gather(paused, queued), 5)
    assert await _gets_a_slot(admission)


async def test_a_cancelled_or_ended_wait_for_the_slot_again_loses_no_slot() -> None:
    lent = await _lent_and_waited_for()
    lent.waiting.cancel()  # the paused call was cancelled while it waited
    with pytest.raises(asyncio.CancelledError):
        await lent.waiting
    assert not lent.lease.held
    waiting = asyncio.create_task(lent.lease.reacquire())  # it waits again, and its rollout ends
    await asyncio.sleep(0)
    lent.leave_paused.set()
    await asyncio.wait_for(lent.paused, 5)
    lent.leave_other.set()  # the slot reaches the ended rollout's wait, which gives it back
    await asyncio.wait_for(asyncio.gather(lent.other, waiting), 5)
    assert not lent.lease.held
    assert await _gets_a_slot(lent.admission)
    async with lent.admission.slot(), asyncio.timeout(5):  # exactly one slot: not two, not none
        assert not await _gets_a_slot(lent.admission)


async def test_a_slot_handed_over_as_its_waiter_is_cancelled_goes_on_to_the_next() -> None:
    lent = await _lent_and_waited_for()
    next_one = asyncio.create_task(_running(lent.admission))
    await asyncio.sleep(0)
    lent.other_lease.release()  # the slot is handed to the waiting one, which has not run yet
    lent.waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await lent.waiting
    task, _, leave_next = await asyncio.wait_for(next_one, 5)
    assert not lent.lease.held
    for leave in (leave_next, lent.leave_paused, lent.leave_other):
        leave.set()
    await asyncio.wait_for(asyncio.gather(task, lent.paused, lent.other), 5)
    assert await _gets_a_slot(lent.admission)


async def test_a_lent_slot_is_neither_running_nor_queued_until_it_is_waited_for_again() -> None:
    reader = InMemoryMetricReader()
    admission = Admission(Settings(max_running=1, max_queued=1), Metrics(MeterProvider([reader])))

    def gauges() -> tuple[int, int]:
        found = points(reader)
        key = frozenset[tuple[str, str]]()
        return found.get(("rollout.rollouts.running", key), 0), found.get(
            ("rollout.queue.depth", key), 0
        )

    paused, lease, leave_paused = await _running(admission)
    assert gauges() == (1, 0)
    lease.release()
    assert gauges() == (0, 0)
    other, _, leave_other = await _running(admission)
    waiting = asyncio.create_task(lease.reacquire())
    await asyncio.sleep(0)
    assert gauges() == (1, 1)  # the other runs; the paused one waits for its slot again
    leave_other.set()
    await asyncio.wait_for(asyncio.gather(other, waiting), 5)
    assert gauges() == (1, 0)
    leave_paused.set()
    await asyncio.wait_for(paused, 5)
    assert gauges() == (0, 0)
