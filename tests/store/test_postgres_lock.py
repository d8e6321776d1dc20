"""`shared_lock` among servers sharing one PostgreSQL database: a second server waits while
one holds it, and takes it as soon as the holder's process dies (the lock dies with its
session; a lease-less row lock would stay taken)."""

from __future__ import annotations

import asyncio
import sys
import uuid

import psycopg

from service.store.postgres_lock import APPLICATION_NAME, shared_lock
from tests.e2e.processes import eventually

_HOLD = """
import asyncio, sys
from service.store.postgres_lock import shared_lock

async def hold() -> None:
    async with shared_lock(sys.argv[1], sys.argv[2]):
        print("held", flush=True)
        await asyncio.sleep(3600)

asyncio.run(hold())
"""
"""Another server: takes the lock, says so, and keeps it until it is killed."""


async def test_the_lock_waits_for_its_holder_and_passes_on_when_the_holder_dies(
    migrated_database: str,
) -> None:
    name = f"test-{uuid.uuid4().hex}"
    holder = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _HOLD, migrated_database, name, stdout=asyncio.subprocess.PIPE
    )
    assert holder.stdout is not None
    try:
        assert await holder.stdout.readline() == b"held\n"
        taken = asyncio.Event()

        async def take() -> None:
            async with shared_lock(migrated_database, name):
                taken.set()

        taking = asyncio.create_task(take())
        await eventually(lambda: _waiting(migrated_database) == 1)
        assert not taken.is_set()
    finally:
        holder.kill()
        await holder.wait()
    await taking
    assert taken.is_set()
    assert _waiting(migrated_database) == 0


def _waiting(url: str) -> int:
    """Lock connections waiting for a lock."""
    with psycopg.connect(url) as conn:
        [(waiting,)] = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = %s AND wait_event_type = 'Lock'",
            (APPLICATION_NAME,),
        ).fetchall()
    count: int = waiting
    return count
