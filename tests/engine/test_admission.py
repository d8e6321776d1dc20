"""Admission's places in memory: what fits, what a reservation holds, and its close."""

from __future__ import annotations

import asyncio

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


async def test_at_most_max_running_hold_a_slot_at_once() -> None:
    admission = _admission(max_running=1)
    inside = asyncio.Event()
    leave = asyncio.Event()

    async def run() -> None:
        async with admission.slot():
            inside.set()
            await leave.wait()

    first = asyncio.create_task(run())
    await inside.wait()
    inside.clear()
    second = asyncio.create_task(run())
    await asyncio.sleep(0.01)
    assert not inside.is_set(), "a second rollout ran beside the only slot's holder"
    leave.set()
    await asyncio.wait_for(asyncio.gather(first, second), 5)
    assert inside.is_set()


async def test_a_closed_admission_refuses_even_a_caller_already_waiting() -> None:
    admission = _admission()
    held = asyncio.Event()
    release = asyncio.Event()

    async def admitting() -> None:
        async with admission.admitting():
            held.set()
            await release.wait()

    under_way = asyncio.create_task(admitting())
    await held.wait()
    waiting = asyncio.create_task(admitting())
    closing = asyncio.create_task(admission.close())
    await asyncio.sleep(0.01)
    assert not closing.done(), "close did not wait for the admission under way"
    release.set()
    await asyncio.wait_for(closing, 5)
    await under_way
    with pytest.raises(ShuttingDownError):
        await waiting
    with pytest.raises(ShuttingDownError):
        admission.check_open()
