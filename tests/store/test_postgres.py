"""What only the PostgreSQL store has: yoyo's migrations on a fresh database (replicas starting
together), no secret in any table, and a URL that never shows its password."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import psycopg

from service.engine.groups.manager import Store
from service.models import Phase, PhaseChanged, RolloutEvent, RolloutStatus
from service.store.postgres import PostgresStore
from tests.store.postgres_server import PostgresServer
from tests.store.samples import BASE_TIME, full_rollout, rollout

_TABLES = ("rollouts", "rollout_labels", "events", "groups")


def test_matches_the_store_protocols() -> None:
    store: Store = PostgresStore("postgresql://u@127.0.0.1:1/db")  # mypy checks the shape
    assert isinstance(store, PostgresStore)


async def test_replicas_opening_a_fresh_database_together_migrate_it_once(
    postgres_server: PostgresServer,
) -> None:
    url = postgres_server.create_database()
    stores = [PostgresStore(url) for _ in range(3)]

    await asyncio.gather(*(store.open() for store in stores))
    try:
        inserted = await stores[0].insert(rollout(1, request_id="req"))
        assert await stores[2].get(inserted.id) == inserted
    finally:
        await asyncio.gather(*(store.close() for store in stores))

    with psycopg.connect(url) as conn:
        applied = conn.execute("SELECT migration_id FROM _yoyo_migration").fetchall()
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
        ).fetchall()
    assert applied == [("0001.rollouts-events-groups",)]
    assert set(_TABLES) <= {name for (name,) in tables}


async def test_api_key_never_lands_in_the_database(postgres_url: str) -> None:
    secret = "sk-live-4f9c2e1d8b7a"
    leaky = full_rollout(api_key=secret)
    async with PostgresStore(postgres_url) as store:
        inserted = await store.insert(leaky)
        await store.save(leaky)
        final = PhaseChanged(phase=Phase.DONE, status=RolloutStatus.FAILED)
        events = [
            RolloutEvent(
                rollout_id=leaky.id,
                seq=seq,
                time=BASE_TIME + timedelta(seconds=seq),
                payload=payload,
            )
            for seq, payload in ((1, final), (2, leaky))
        ]
        await store.append_events(events)
        stored = await store.get(leaky.id)

    assert inserted.spec.endpoint.api_key == ""
    assert stored is not None
    assert stored.spec == leaky.spec.redacted()
    with psycopg.connect(postgres_url) as conn:
        for table in _TABLES:
            rows = conn.execute(f"SELECT t::text FROM {table} AS t").fetchall()
            assert table == "groups" or rows, table
            assert not [row for (row,) in rows if secret in row], table


def test_the_url_password_is_never_shown() -> None:
    store = PostgresStore("postgresql://rollout:hunter2-secret@127.0.0.1:5432/rollouts")

    assert "hunter2" not in repr(store)
    assert "hunter2" not in str(store)
