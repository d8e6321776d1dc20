"""Tenants in the store: request_id is unique per tenant, lists and events carry the tenant,
and a database written before tenants existed migrates without losing anything."""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest

from service.models import AgentOutput, AgentOutputKind, Rollout, RolloutEvent, RolloutStatus
from service.store.codec import encode_model
from service.store.rows import encode_insert
from service.store.schema import MIGRATIONS, SCHEMA_VERSION
from service.store.sqlite import SqliteStore
from testing.samples import BASE_TIME, rollout
from tests.store.conftest import AnyStore


def of(tenant: str, number: int, **kwargs: object) -> Rollout:
    return rollout(number, **kwargs).model_copy(update={"tenant": tenant})  # type: ignore[arg-type]


def output(rollout_id: str, seq: int) -> RolloutEvent:
    return RolloutEvent(
        rollout_id=rollout_id,
        seq=seq,
        time=BASE_TIME + timedelta(milliseconds=seq),
        payload=AgentOutput(kind=AgentOutputKind.STDOUT, text=f"line {seq}"),
    )


async def test_one_request_id_in_two_tenants_makes_two_rollouts(store: AnyStore) -> None:
    first = await store.insert(of("a", 1, request_id="req"))
    second = await store.insert(of("b", 2, request_id="req"))
    again = await store.insert(of("a", 3, request_id="req"))

    assert (first.id, second.id, again.id) == ("r0001", "r0002", "r0001")
    assert (await store.find_by_request_id("req", tenant="b")) == second
    assert (await store.find_by_request_id("req", tenant="")) is None
    assert (await store.get("r0002")) == second


@pytest.mark.parametrize("labels", [{}, {"team": "rl"}, {"team": "rl", "run": "7"}])
async def test_list_of_a_tenant_holds_only_its_rollouts(
    store: AnyStore, labels: dict[str, str]
) -> None:
    for number in range(1, 9):
        tenant = "a" if number % 2 else "b"
        await store.insert(of(tenant, number, labels={"team": "rl", "run": "7"}))

    pages: list[Rollout] = []
    token = ""
    while True:
        page, token = await store.list(
            labels=labels, statuses=[], page_size=2, page_token=token, tenant="a"
        )
        pages += page
        if not token:
            break
    everyone, _ = await store.list(labels=labels, statuses=[], page_size=100, page_token="")

    assert [r.id for r in pages] == ["r0007", "r0005", "r0003", "r0001"]
    assert {r.tenant for r in pages} == {"a"}
    assert len(everyone) == 8


async def test_list_combines_tenant_and_status(store: AnyStore) -> None:
    await store.insert(of("a", 1, status=RolloutStatus.FAILED))
    await store.insert(of("a", 2))
    await store.insert(of("b", 3, status=RolloutStatus.FAILED))

    page, _ = await store.list(
        labels={}, statuses=[RolloutStatus.FAILED], page_size=10, page_token="", tenant="a"
    )

    assert [r.id for r in page] == ["r0001"]


async def test_stored_events_carry_their_rollouts_tenant(store: AnyStore) -> None:
    await store.insert(of("a", 1, labels={"team": "rl"}))
    await store.append_events([output("r0001", 1), output("r0001", 2)])

    events = await store.events("r0001", after_seq=0, limit=10)

    assert [(e.tenant, e.labels) for e in events] == [("a", {"team": "rl"})] * 2


def _version_1_database(path: Path) -> None:
    """A database as the server wrote it before tenants: two rollouts, labels and events."""
    conn = sqlite3.connect(path, isolation_level=None)
    for statement in MIGRATIONS[0]:
        conn.execute(statement)
    conn.execute("PRAGMA user_version = 1")
    for number in (1, 2):
        values = encode_insert(rollout(number, request_id=f"req-{number}", labels={"k": "v"}))
        conn.execute(
            "INSERT INTO rollouts (id, request_id, status, phase, create_us, create_time,"
            " start_time, finish_time, spec, result) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (values[0], *values[2:11]),  # the columns of version 1
        )
        conn.execute("INSERT INTO rollout_labels VALUES ('k', 'v', ?, ?)", (values[5], values[0]))
        conn.execute(
            "INSERT INTO events VALUES (?, 1, ?, 'AgentOutput', ?)",
            (values[0], BASE_TIME.isoformat(), encode_model(output(values[0], 1).payload)),
        )
    conn.close()


async def test_a_database_from_before_tenants_keeps_everything(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _version_1_database(path)

    async with SqliteStore(path) as store:
        listed, _ = await store.list(labels={"k": "v"}, statuses=[], page_size=10, page_token="")
        events = await store.events("r0001", after_seq=0, limit=10)
        found = await store.find_by_request_id("req-2")
        duplicate = await store.insert(rollout(9, request_id="req-1"))

    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        assert conn.execute("PRAGMA foreign_key_list(events)").fetchone()[2] == "rollouts"
    finally:
        conn.close()
    assert [(r.id, r.tenant) for r in listed] == [("r0002", ""), ("r0001", "")]
    assert [e.payload for e in events] == [output("r0001", 1).payload]
    assert found is not None
    assert found.id == "r0002"
    assert duplicate.id == "r0001"


async def test_deleting_a_migrated_rollout_still_cascades(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _version_1_database(path)
    async with SqliteStore(path):
        pass

    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("DELETE FROM rollouts WHERE id = 'r0001'")
        left = conn.execute("SELECT rollout_id FROM events").fetchall()
        labels = conn.execute("SELECT rollout_id FROM rollout_labels").fetchall()
    finally:
        conn.close()
    assert left == [("r0002",)]
    assert labels == [("r0002",)]
