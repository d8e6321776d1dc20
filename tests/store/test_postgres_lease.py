"""A replica's lease on PostgreSQL: its heartbeat never waits for the store's pool (a replica
whose writes queue there must not lose its lease), survives a dropped connection, and a
rollout taken over says which server stopped and which one ended it, by instance id (never by
host name or state folder)."""

from __future__ import annotations

import asyncio
from datetime import datetime

import psycopg

from service.store import postgres
from service.store.base import RESTARTED
from service.store.postgres import PostgresStore
from service.store.postgres_leases import APPLICATION_NAME
from testing.samples import rollout
from tests.e2e.processes import eventually

_LEASE_S = 1.2
"""A short lease: a heartbeat every 0.2 s."""


async def test_the_heartbeat_renews_while_every_pool_connection_waits_on_a_lock(
    postgres_url: str,
) -> None:
    async with PostgresStore(postgres_url, server="a", lease_s=_LEASE_S) as store:
        queued = await store.insert(rollout(1))
        with psycopg.connect(postgres_url) as locker:
            locker.execute("SELECT 1 FROM rollouts WHERE id = %s FOR UPDATE", (queued.id,))
            # Each save holds a pool connection, waiting for the row: the pool is used up.
            saves = [asyncio.create_task(store.save(queued)) for _ in range(postgres._POOL_SIZE)]
            await eventually(lambda: _waiting_on_locks(postgres_url) == postgres._POOL_SIZE)
            before = _heartbeat(postgres_url, "a")
            await eventually(lambda: _heartbeat(postgres_url, "a") != before, timeout_s=60)
            renewed = _heartbeat(postgres_url, "a")
            waiting = _waiting_on_locks(postgres_url)
        await asyncio.gather(*saves)

    assert renewed > before
    assert waiting == postgres._POOL_SIZE  # the pool was still used up when it renewed


async def test_the_heartbeat_reconnects_when_its_connection_drops(postgres_url: str) -> None:
    async with PostgresStore(postgres_url, server="a", lease_s=_LEASE_S):
        held = _leases(postgres_url)
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            [(ended,)] = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = %s",
                (APPLICATION_NAME,),
            ).fetchall()
            [(dropped_at,)] = conn.execute("SELECT now()").fetchall()
        await eventually(lambda: _heartbeat(postgres_url, "a") > dropped_at, timeout_s=60)
        leases = _leases(postgres_url)

    assert ended is True
    assert leases == held  # the same lease, renewed


async def test_a_rollout_taken_over_names_the_server_that_stopped_and_its_taker_by_instance(
    postgres_url: str,
) -> None:
    lost = asyncio.Event()

    def stop_everything() -> int:
        lost.set()
        return 0

    async with (
        PostgresStore(postgres_url, server=_server("a"), instance="replica-a") as a,
        PostgresStore(postgres_url, server=_server("b"), instance="replica-b") as b,
        PostgresStore(
            postgres_url, server=_server("c"), instance="replica-c", lease_s=_LEASE_S
        ) as c,
    ):
        c.on_lease_lost(stop_everything)
        by_a = await a.insert(rollout(1))
        by_c = await c.insert(rollout(2))
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(
                "UPDATE servers SET heartbeat_at = now() - interval '1 hour' WHERE server = %s",
                (_server("a"),),
            )
            [taken_by_b] = await b.non_terminal()
            # as a peer's expiry would
            conn.execute("DELETE FROM servers WHERE server = %s", (_server("c"),))
        await lost.wait()  # c's heartbeat found its lease gone and took a new one
        [taken_by_c] = await c.non_terminal()
    # b restarts: what it claimed is its own again; c is gone (it stopped, lease given up).
    async with PostgresStore(
        postgres_url, server=_server("b"), instance="replica-b"
    ) as b_restarted:
        at_restart = await b_restarted.non_terminal()

    assert taken_by_b.rollout.id == by_a.id
    assert taken_by_b.reason == (
        "interrupted: its server (replica-a) stopped renewing its lease; ended by replica-b"
    )
    assert taken_by_c.rollout.id == by_c.id  # its own, from before it lost its lease
    assert taken_by_c.reason == (
        "interrupted: its server (replica-c) stopped renewing its lease; ended by replica-c"
    )
    assert [(taken.rollout.id, taken.reason) for taken in at_restart] == [
        (by_a.id, RESTARTED),
        (
            by_c.id,
            "interrupted: its server (replica-c) stopped renewing its lease; ended by replica-b",
        ),
    ]
    reasons = [taken_by_b.reason, taken_by_c.reason, *(taken.reason for taken in at_restart)]
    assert not [reason for reason in reasons if "host-" in reason or "/state" in reason]


def _server(name: str) -> str:
    """A server name as `new_store` makes it: host and state folder, which clients never see."""
    return f"host-{name}:/var/lib/rollout/state-{name}"


def _heartbeat(url: str, server: str) -> datetime:
    with psycopg.connect(url) as conn:
        [(heartbeat_at,)] = conn.execute(
            "SELECT heartbeat_at FROM servers WHERE server = %s", (server,)
        ).fetchall()
    result: datetime = heartbeat_at
    return result


def _leases(url: str) -> list[tuple[str, str]]:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT server, owner FROM servers").fetchall()


def _waiting_on_locks(url: str) -> int:
    """Connections to the database waiting for a lock."""
    with psycopg.connect(url) as conn:
        [(waiting,)] = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        ).fetchall()
    count: int = waiting
    return count
