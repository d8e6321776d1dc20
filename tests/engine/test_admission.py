"""Admission's places in memory: what fits, what a reservation holds, and its close."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

import pytest

from service.config import Settings
from service.engine.admission import Admission
from service.errors import CapacityError, ShuttingDownError
from service.telemetry.metrics import Metrics


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

    def __init__(self, enter: Callable[[], AbstractAsyncContextManager[None]]) -> None:
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
