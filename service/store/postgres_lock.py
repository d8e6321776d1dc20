"""A lock by name among the servers sharing one PostgreSQL database, for work that must not
be done twice at once across replicas (checking for and starting a build of one E2B template).

It is a session-level advisory lock on a connection of its own, never the store's pool (it may
be held for minutes, through uploads). It dies with its session: a holder whose process dies
releases it as the kernel closes the socket; one whose host or network goes is noticed by the
database's TCP keepalives (`_KEEPALIVES`, about 25 s), not the system's default two hours.
Without a database (SQLite) a single server runs: there is no other server to exclude, and
nothing is held.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import psycopg

__all__ = ["APPLICATION_NAME", "shared_lock"]

APPLICATION_NAME = "rollout-lock"
"""The lock connection's name in pg_stat_activity."""

_KEEPALIVES = (
    "SELECT set_config('tcp_keepalives_idle', '10', false),"
    " set_config('tcp_keepalives_interval', '5', false),"
    " set_config('tcp_keepalives_count', '3', false)"
)
"""The database probes an idle holder's connection after 10 s, and drops it after 3 missed."""


@contextlib.asynccontextmanager
async def shared_lock(database_url: str | None, name: str) -> AsyncIterator[None]:
    """Hold lock `name` among the servers sharing the database at `database_url` (None: no
    other server, nothing to hold); waits while another holds it. Raises psycopg.Error when
    the database cannot be reached."""
    if not database_url:
        yield
        return
    async with await psycopg.AsyncConnection.connect(
        database_url, autocommit=True, application_name=APPLICATION_NAME
    ) as conn:
        await conn.execute(_KEEPALIVES)
        await conn.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (name,))
        yield
