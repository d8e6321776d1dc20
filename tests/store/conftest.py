"""The `store` fixture: every store test runs against SQLite and against a real PostgreSQL.

PostgreSQL is one cluster and one database for the session (`PostgresServer`), emptied for
each test. Where
Debian's `postgresql` package is missing, the postgres cases are skipped with that reason.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from service.store.postgres import PostgresStore, migrate
from service.store.sqlite import SqliteStore
from testing.postgres_server import PostgresServer, postgres_bin_dir

AnyStore = SqliteStore | PostgresStore
"""Both backends: each has every method of `RolloutStore` and `GroupStore`."""


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    bin_dir = postgres_bin_dir()
    if bin_dir is None:
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql)")
    server = PostgresServer(bin_dir)
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def migrated_database(postgres_server: PostgresServer) -> str:
    """The URL of the session's database, migrated once."""
    url = postgres_server.create_database()
    migrate(url)
    return url


@pytest.fixture
def postgres_url(migrated_database: str) -> str:
    """The session's database, emptied for this test (a new database per test costs seconds on
    a loaded machine; a TRUNCATE costs milliseconds)."""
    with psycopg.connect(migrated_database, autocommit=True) as conn:
        conn.execute(
            "TRUNCATE rollouts, rollout_labels, events, groups, group_labels, servers,"
            " cancel_requests, group_cancel_requests"
        )
    return migrated_database


@pytest.fixture(params=["sqlite", "postgres"])
def new_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], AnyStore]:
    """Makes an unopened store of this case's backend; every call opens the same database (as
    the same server, for PostgreSQL)."""
    if request.param == "sqlite":
        path = tmp_path / "state" / "rollouts.db"
        return lambda: SqliteStore(path)
    url: str = request.getfixturevalue("postgres_url")
    return lambda: PostgresStore(url, server="this-server")


@pytest.fixture
async def store(new_store: Callable[[], AnyStore]) -> AsyncIterator[AnyStore]:
    """An open store of this case's backend, closed after the test."""
    async with new_store() as opened:
        yield opened
