"""The event hub with a real SQLite store: order, replay, fan-out and lagging watchers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from service.engine import events as events_module
from service.engine.events import EventHub
from service.models import (
    AgentOutput,
    AgentOutputKind,
    Phase,
    PhaseChanged,
    Rollout,
    RolloutEvent,
    RolloutResult,
    RolloutSpec,
    RolloutStatus,
    TaskSpec,
    Turn,
)
from service.store.sqlite import SqliteStore


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    store = SqliteStore(tmp_path / "events.db")
    await store.open()
    yield store
    await store.close()


@pytest.fixture
async def hub(store: SqliteStore) -> AsyncIterator[EventHub]:
    hub = EventHub(store)
    await hub.start()
    yield hub
    await hub.stop()


async def admit(store: SqliteStore, hub: EventHub, rollout_id: str, **labels: str) -> Rollout:
    spec = RolloutSpec(task=TaskSpec(instruction="x"), labels=labels)
    rollout = Rollout(id=rollout_id, spec=spec, create_time=datetime.now(UTC))
    await store.insert(rollout)
    hub.open(rollout_id, labels)
    return rollout


def output(text: str) -> AgentOutput:
    return AgentOutput(kind=AgentOutputKind.STDOUT, text=text)


def finish(rollout: Rollout) -> Rollout:
    return rollout.model_copy(update={"status": RolloutStatus.SUCCEEDED, "phase": Phase.DONE})


async def test_live_watchers_and_late_replay_see_the_same_sequence(
    store: SqliteStore, hub: EventHub
) -> None:
    rollout = await admit(store, hub, "r1")
    early = asyncio.create_task(_drain(hub, "r1"))
    await asyncio.sleep(0)
    hub.publish("r1", PhaseChanged(phase=Phase.QUEUED, status=RolloutStatus.QUEUED))
    for i in range(50):
        hub.publish("r1", output(f"line {i}"))
    hub.publish("r1", finish(rollout))
    live = await asyncio.wait_for(early, 5)
    await hub.flush()
    assert hub.live_log("r1") is None, "a finished, persisted log leaves memory"
    replayed = await _drain(hub, "r1")
    assert [e.seq for e in live] == list(range(1, 53))
    assert [e.model_dump() for e in replayed] == [e.model_dump() for e in live]
    assert [e.seq for e in await _drain(hub, "r1", after_seq=50)] == [51, 52]


async def test_a_watcher_that_never_reads_does_not_hold_up_publishing(
    store: SqliteStore, hub: EventHub
) -> None:
    rollout = await admit(store, hub, "r2")
    stalled = hub.watch("r2", 0).__aiter__()
    first = asyncio.ensure_future(anext(stalled))
    for i in range(10_000):
        hub.publish("r2", output(str(i)))
    hub.publish("r2", finish(rollout))
    assert (await first).seq == 1
    await hub.flush()
    assert len(await store.events("r2", after_seq=0, limit=20_000)) == 10_001


async def test_label_watcher_that_falls_behind_catches_up_from_the_store(
    store: SqliteStore, hub: EventHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(events_module, "_FEED_BYTES", 8 * 600)  # about 8 events
    small = EventHub(store)
    await small.start()
    try:
        mine = await admit(store, small, "mine", team="a")
        await admit(store, small, "other", team="b")
        watcher = small.watch_all({"team": "a"}).__aiter__()
        first = asyncio.ensure_future(anext(watcher))
        await asyncio.sleep(0)
        small.publish("mine", output("0"))
        assert (await first).seq == 1
        for i in range(1, 30):  # far more than the feed holds while the watcher is away
            small.publish("mine", output(str(i)))
            small.publish("other", output(str(i)))
        small.publish("mine", finish(mine))
        seen = [await asyncio.wait_for(anext(watcher), 5) for _ in range(30)]
    finally:
        await small.stop()
    assert {e.rollout_id for e in seen} == {"mine"}
    assert [e.seq for e in seen] == list(range(2, 32))


async def test_a_rollout_that_began_and_ended_while_a_watcher_was_behind_is_not_lost(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(events_module, "_FEED_BYTES", 8 * 600)  # about 8 events
    small = EventHub(store)
    await small.start()
    try:
        mine = await admit(store, small, "mine", team="a")
        watcher = small.watch_all({"team": "a"}).__aiter__()
        first = asyncio.ensure_future(anext(watcher))
        await asyncio.sleep(0)
        small.publish("mine", output("0"))
        assert (await first).rollout_id == "mine"
        brief = await admit(store, small, "brief", team="a")
        for i in range(20):
            small.publish("brief", output(str(i)))
        small.publish("brief", finish(brief))
        await small.flush()
        assert small.live_log("brief") is None, "brief ended and left memory before the catch-up"
        for i in range(1, 20):
            small.publish("mine", output(str(i)))
        small.publish("mine", finish(mine))
        seen = [await asyncio.wait_for(anext(watcher), 5) for _ in range(41)]
    finally:
        await small.stop()
    assert sorted((e.rollout_id, e.seq) for e in seen) == sorted(
        [("brief", seq) for seq in range(1, 22)] + [("mine", seq) for seq in range(2, 22)]
    )


async def test_the_final_event_keeps_the_slim_rollout_only(
    store: SqliteStore, hub: EventHub
) -> None:
    rollout = await admit(store, hub, "r4")
    task = TaskSpec(instruction="x", files={"big.bin": b"\1" * 1_000_000})
    result = RolloutResult(turns=[Turn(index=0)], files={"out": b"\2" * 1_000_000})
    finished = finish(rollout).model_copy(
        update={"spec": rollout.spec.model_copy(update={"task": task}), "result": result}
    )

    held = hub.publish("r4", finished)
    await hub.flush()
    (replayed,) = await _drain(hub, "r4")

    assert held.payload == replayed.payload == finished.slim()
    assert isinstance(held.payload, Rollout)
    assert held.payload.result.turn_count == 1


async def _drain(hub: EventHub, rollout_id: str, after_seq: int = 0) -> list[RolloutEvent]:
    return [event async for event in hub.watch(rollout_id, after_seq)]
