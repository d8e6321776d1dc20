"""The store protocol against both backends (`store`, `new_store`: tests/store/conftest.py),
and what only SQLite has (a file in WAL mode, versioned by PRAGMA user_version)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

from service.errors import NotFoundError, SpecError
from service.models import (
    AgentOutput,
    AgentOutputKind,
    EventPayload,
    Phase,
    PhaseChanged,
    RolloutEvent,
    RolloutStatus,
)
from service.store.base import RESTARTED, RolloutStore
from service.store.codec import encode_page_token
from service.store.schema import SCHEMA_VERSION
from service.store.sqlite import SqliteStore
from testing.samples import BASE_TIME, full_rollout, payloads, rollout
from tests.store.conftest import AnyStore


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "rollouts.db"


def event(rollout_id: str, seq: int, payload: EventPayload | None = None) -> RolloutEvent:
    return RolloutEvent(
        rollout_id=rollout_id,
        seq=seq,
        time=BASE_TIME + timedelta(milliseconds=seq),
        payload=payload or AgentOutput(kind=AgentOutputKind.STDOUT, text=f"line {seq}"),
    )


def test_matches_the_protocol(db_path: Path) -> None:
    store: RolloutStore = SqliteStore(db_path)
    assert store is not None


async def test_rollout_round_trips_with_binary_files(store: AnyStore) -> None:
    finished = full_rollout()
    queued = finished.model_copy(update={"status": RolloutStatus.QUEUED, "phase": Phase.QUEUED})

    assert await store.insert(queued) == queued
    assert await store.get(queued.id) == queued
    await store.save(finished)
    assert await store.get(finished.id) == finished
    assert await store.get("missing") is None


@pytest.mark.parametrize("payload", payloads(), ids=lambda payload: type(payload).__name__)
async def test_every_payload_type_round_trips(store: AnyStore, payload: EventPayload) -> None:
    owner = await store.insert(rollout(1, labels={"team": "rl"}))
    sent = event(owner.id, 1, payload).model_copy(update={"labels": {"team": "rl"}})

    await store.append_events([sent])

    [received] = await store.events(owner.id, after_seq=0, limit=10)
    assert type(received.payload) is type(payload)
    assert received == sent


async def test_events_are_read_in_seq_order_after_seq_up_to_limit(store: AnyStore) -> None:
    await store.insert(rollout(1))
    await store.insert(rollout(2))
    await store.append_events([event("r0001", seq) for seq in (3, 1, 2)])
    await store.append_events([event("r0002", 1), event("r0001", 4), event("r0001", 5)])

    assert [e.seq for e in await store.events("r0001", after_seq=0, limit=100)] == [1, 2, 3, 4, 5]
    assert [e.seq for e in await store.events("r0001", after_seq=2, limit=2)] == [3, 4]
    assert [e.seq for e in await store.events("r0001", after_seq=5, limit=10)] == []
    assert await store.events("r0001", after_seq=0, limit=0) == []
    assert [e.rollout_id for e in await store.events("r0002", after_seq=0, limit=9)] == ["r0002"]
    assert await store.events("missing", after_seq=0, limit=10) == []


async def test_append_events_is_all_or_nothing(store: AnyStore) -> None:
    await store.insert(rollout(1))
    await store.append_events([event("r0001", 1)])

    with pytest.raises(ValueError, match="already stored"):
        await store.append_events([event("r0001", 2), event("r0001", 1)])
    with pytest.raises(NotFoundError, match="missing"):
        await store.append_events([event("r0001", 2), event("missing", 1)])

    assert [e.seq for e in await store.events("r0001", after_seq=0, limit=10)] == [1]


async def test_second_insert_with_request_id_returns_the_first(store: AnyStore) -> None:
    first = await store.insert(rollout(1, request_id="req"))

    again = await store.insert(rollout(2, request_id="req"))

    assert again == first
    assert await store.get("r0002") is None
    assert await store.find_by_request_id("req") == first
    assert await store.find_by_request_id("") is None


async def test_rollouts_without_request_id_never_collide(store: AnyStore) -> None:
    await store.insert(rollout(1))
    await store.insert(rollout(2))

    page, _ = await store.list(labels={}, statuses=[], page_size=10, page_token="")
    assert [r.id for r in page] == ["r0002", "r0001"]


async def test_reinserting_an_id_returns_the_stored_rollout(store: AnyStore) -> None:
    first = await store.insert(rollout(1))

    again = await store.insert(rollout(1, labels={"other": "x"}))

    assert again == first


async def test_concurrent_inserts_with_one_request_id_keep_one(store: AnyStore) -> None:
    attempts = [rollout(n, request_id="same") for n in range(20)]

    results = await asyncio.gather(*(store.insert(attempt) for attempt in attempts))

    assert len({result.id for result in results}) == 1
    page, _ = await store.list(labels={}, statuses=[], page_size=100, page_token="")
    assert [r.id for r in page] == [results[0].id]


async def test_two_stores_on_one_database_keep_one_rollout_per_request_id(
    new_store: Callable[[], AnyStore],
) -> None:
    async with new_store() as one, new_store() as two:
        results = await asyncio.gather(
            *(
                (one if n % 2 else two).insert(rollout(n, request_id=f"req-{n // 2}"))
                for n in range(40)
            )
        )
        page, _ = await one.list(labels={}, statuses=[], page_size=100, page_token="")

    assert len(page) == 20
    for n, result in enumerate(results):
        assert result.spec.request_id == f"req-{n // 2}"
        assert result.id in {f"r{2 * (n // 2):04d}", f"r{2 * (n // 2) + 1:04d}"}
        assert result == results[n ^ 1]


async def test_list_filters_by_every_label_and_by_status(store: AnyStore) -> None:
    await store.insert(rollout(1, labels={"team": "rl", "run": "a"}))
    await store.insert(rollout(2, labels={"team": "rl", "run": "b"}, status=RolloutStatus.FAILED))
    await store.insert(rollout(3, labels={"team": "rl"}, status=RolloutStatus.SUCCEEDED))
    await store.insert(rollout(4, labels={"team": "eval", "run": "a"}))

    async def ids(labels: dict[str, str], statuses: list[RolloutStatus]) -> list[str]:
        page, token = await store.list(
            labels=labels, statuses=statuses, page_size=10, page_token=""
        )
        assert token == ""
        return [r.id for r in page]

    assert await ids({}, []) == ["r0004", "r0003", "r0002", "r0001"]
    assert await ids({"team": "rl"}, []) == ["r0003", "r0002", "r0001"]
    assert await ids({"team": "rl", "run": "a"}, []) == ["r0001"]
    assert await ids({"run": "a"}, []) == ["r0004", "r0001"]
    assert await ids({"team": "r"}, []) == []
    assert await ids({}, [RolloutStatus.FAILED, RolloutStatus.SUCCEEDED]) == ["r0003", "r0002"]
    assert await ids({"run": "b"}, [RolloutStatus.QUEUED]) == []


@pytest.mark.parametrize(
    ("labels", "statuses"),
    [
        ({}, []),
        ({"all": "1"}, []),
        ({}, [RolloutStatus.QUEUED]),
        ({"all": "1", "odd": "1"}, [RolloutStatus.QUEUED, RolloutStatus.FAILED]),
        ({"odd": "0"}, [RolloutStatus.QUEUED]),
    ],
)
async def test_list_pages_through_every_match_once(
    store: AnyStore, labels: dict[str, str], statuses: list[RolloutStatus]
) -> None:
    # Ties on create_time are ordered by id, so a page boundary inside a tie loses nothing.
    created = []
    for n in range(31):
        status = RolloutStatus.FAILED if n % 5 == 0 else RolloutStatus.QUEUED
        tags = {"all": "1", "odd": str(n % 2)}
        at = BASE_TIME + timedelta(seconds=n // 3)
        created.append(await store.insert(rollout(n, labels=tags, status=status, create_time=at)))
    expected = [
        r.id
        for r in reversed(created)
        if labels.items() <= r.spec.labels.items() and (not statuses or r.status in statuses)
    ]

    seen: list[str] = []
    token = ""
    while True:
        page, token = await store.list(
            labels=labels, statuses=statuses, page_size=4, page_token=token
        )
        seen += [r.id for r in page]
        if not token:
            break

    assert len(expected) > 8
    assert seen == expected


@pytest.mark.parametrize(
    "token",
    ["%%%", "bm90IGpzb24=", encode_page_token(1, "x")[:-3], "WyJ4IiwgInkiXQ==", "WzFd"],
)
async def test_list_rejects_a_malformed_page_token(store: AnyStore, token: str) -> None:
    with pytest.raises(SpecError) as caught:
        await store.list(labels={}, statuses=[], page_size=5, page_token=token)

    assert [v.field for v in caught.value.violations] == ["page_token"]


async def test_list_page_size_zero_means_default_and_negative_is_rejected(
    store: AnyStore,
) -> None:
    await store.insert(rollout(1))
    page, _ = await store.list(labels={}, statuses=[], page_size=0, page_token="")
    assert len(page) == 1

    with pytest.raises(SpecError) as caught:
        await store.list(labels={}, statuses=[], page_size=-1, page_token="")
    assert [v.field for v in caught.value.violations] == ["page_size"]


async def test_a_restart_finds_queued_and_running_only(
    new_store: Callable[[], AnyStore],
) -> None:
    async with new_store() as store:
        for n, status in enumerate(RolloutStatus):
            await store.insert(rollout(n, status=status))

    async with new_store() as restarted:
        found = await restarted.non_terminal()

    assert [(r.rollout.id, r.rollout.status, r.reason) for r in found] == [
        ("r0000", RolloutStatus.QUEUED, RESTARTED),
        ("r0001", RolloutStatus.RUNNING, RESTARTED),
    ]


async def test_everything_survives_close_and_reopen(new_store: Callable[[], AnyStore]) -> None:
    finished = full_rollout()
    async with new_store() as store:
        await store.insert(rollout(1, request_id="req", labels={"k": "v"}))
        await store.insert(finished)
        await store.append_events([event(finished.id, 1), event(finished.id, 2, finished)])
        await store.save(rollout(1, status=RolloutStatus.RUNNING))

    async with new_store() as reopened:
        assert await reopened.get(finished.id) == finished
        stored = await reopened.get("r0001")
        assert stored is not None
        assert stored.status is RolloutStatus.RUNNING
        assert stored.spec.labels == {"k": "v"}
        assert (await reopened.insert(rollout(9, request_id="req"))).id == "r0001"
        events = await reopened.events(finished.id, after_seq=0, limit=10)
        assert [type(e.payload) for e in events] == [AgentOutput, type(finished)]
        assert events[1].payload == finished
        assert [r.rollout.id for r in await reopened.non_terminal()] == ["r0001"]


async def test_save_of_an_unknown_rollout_is_not_found(store: AnyStore) -> None:
    with pytest.raises(NotFoundError):
        await store.save(rollout(1))


async def test_api_key_never_lands_in_the_database(db_path: Path) -> None:
    secret = "sk-live-4f9c2e1d8b7a"
    leaky = full_rollout(api_key=secret)
    async with SqliteStore(db_path) as store:
        inserted = await store.insert(leaky)
        await store.save(leaky)
        final = PhaseChanged(phase=Phase.DONE, status=RolloutStatus.FAILED)
        await store.append_events([event(leaky.id, 1, final), event(leaky.id, 2, leaky)])
        stored = await store.get(leaky.id)
        [_, finished] = await store.events(leaky.id, after_seq=0, limit=10)

    assert inserted.spec.endpoint.api_key == ""
    assert stored is not None
    assert stored.spec == leaky.spec.redacted()
    assert finished.payload == leaky.model_copy(update={"spec": leaky.spec.redacted()})
    files = list(db_path.parent.iterdir())
    assert db_path in files
    for file in files:
        assert secret.encode() not in file.read_bytes(), file


async def test_database_is_versioned_and_in_wal_mode(db_path: Path) -> None:
    async with SqliteStore(db_path):
        conn = sqlite3.connect(db_path)
        try:
            assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
            assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        finally:
            conn.close()


async def test_a_newer_schema_is_refused(db_path: Path) -> None:
    async with SqliteStore(db_path):
        pass
    conn = sqlite3.connect(db_path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()

    with pytest.raises(RuntimeError, match="newer"):
        await SqliteStore(db_path).open()


async def test_a_closed_store_refuses_calls(new_store: Callable[[], AnyStore]) -> None:
    store = new_store()
    with pytest.raises(RuntimeError, match="not open"):
        await store.get("x")
    await store.open()
    await store.close()
    await store.close()
    with pytest.raises(RuntimeError, match="not open"):
        await store.get("x")
