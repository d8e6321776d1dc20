"""`SqliteStore`: the embedded `RolloutStore`, one SQLite file in WAL mode.

sqlite3 blocks, so every statement runs on one dedicated worker thread that owns the only
connection: the event loop never waits on the disk, and access is serialized without locks.
Uniqueness (rollout id, request_id, event seq) is enforced by the schema, so it also holds
for several processes sharing the file.
"""

from __future__ import annotations

import asyncio
import builtins
import functools
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar

from service.errors import NotFoundError
from service.models import (
    TERMINAL_STATUSES,
    Group,
    GroupStatus,
    Rollout,
    RolloutEvent,
    RolloutStatus,
)
from service.store import groups
from service.store.base import (
    RESTARTED,
    Holder,
    Interrupted,
    LeaseLostHandler,
    RolloutPage,
    TakeRollout,
)
from service.store.group_listing import GroupPage, sqlite_listed_group, sqlite_page_keys
from service.store.listing import page_query
from service.store.pages import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, read_page
from service.store.rows import (
    ROLLOUT_COLUMNS,
    SLIM_ROLLOUT_COLUMNS,
    decode_event,
    decode_rollout,
    decode_slim_rollout,
    encode_event,
    encode_insert,
    encode_labels,
    encode_save,
    redacted,
)
from service.store.schema import migrate

__all__ = ["DEFAULT_PAGE_SIZE", "MAX_PAGE_SIZE", "SqliteStore"]

_BUSY_TIMEOUT_S = 10.0
"""How long a write waits for another process holding the file's write lock."""

P = ParamSpec("P")
T = TypeVar("T")


class SqliteStore:
    """Rollouts and their events in the SQLite file at `path` (created, with its folder)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._executor: ThreadPoolExecutor | None = None
        self._conn: sqlite3.Connection | None = None

    async def open(self) -> None:
        """Open (or create) the database and migrate its schema to this code's version."""
        if self._executor is not None:
            raise RuntimeError(f"store {self.path} is already open")
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-store")
        try:
            self._conn = await self._submit(_connect, self.path)
        except BaseException:
            self._executor.shutdown(wait=False)
            self._executor = None
            raise

    async def close(self) -> None:
        """Close the database after every statement already submitted has run."""
        executor, conn = self._executor, self._conn
        if executor is None:
            return
        self._executor = None
        self._conn = None
        try:
            if conn is not None:
                await asyncio.get_running_loop().run_in_executor(executor, conn.close)
        finally:
            executor.shutdown(wait=False)

    async def __aenter__(self) -> SqliteStore:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def insert(self, rollout: Rollout) -> Rollout:
        """Insert a new rollout; if its tenant's request_id (or its id) is taken, return that
        rollout instead."""
        stored = redacted(rollout)
        existing = await self._run(_insert, encode_insert(stored), encode_labels(stored))
        return stored if existing is None else existing

    async def save(self, rollout: Rollout) -> None:
        """Overwrite an existing rollout's status, phase, result and times (never its spec)."""
        if not await self._run(_save, encode_save(rollout)):
            raise NotFoundError(f"no rollout {rollout.id!r} to save")

    async def get(self, rollout_id: str) -> Rollout | None:
        return await self._run(_get, "id", rollout_id)

    async def find_by_request_id(self, request_id: str, *, tenant: str = "") -> Rollout | None:
        """The rollout `tenant` inserted with this (non-empty) request_id, if any."""
        if not request_id:
            return None
        return await self._run(_find_by_request_id, tenant, request_id)

    async def list(
        self,
        *,
        labels: Mapping[str, str],
        statuses: Sequence[RolloutStatus],
        page_size: int,
        page_token: str,
        tenant: str | None = None,
        slim: bool = False,
        take: TakeRollout | None = None,
    ) -> RolloutPage:
        """Rollouts newest first, of one tenant or (None) of all (`read_page`).

        Raises SpecError naming "page_size" or "page_token".
        """
        status_values = [RolloutStatus(status).value for status in statuses]

        async def page_keys(after: tuple[int, str] | None, limit: int) -> list[tuple[int, str]]:
            return await self._run(_page_keys, dict(labels), status_values, tenant, after, limit)

        async def read(rollout_id: str) -> Rollout:
            return await self._run(_listed, rollout_id, slim)

        return await read_page(page_size, page_token, page_keys, read, take)

    async def non_terminal(self) -> builtins.list[Interrupted]:
        """Rollouts not in a terminal status, oldest first: an earlier run left them."""
        rollouts = await self._run(_non_terminal)
        return [Interrupted(rollout, RESTARTED) for rollout in rollouts]

    async def append_events(self, events: Sequence[RolloutEvent]) -> None:
        """Append events (seq already assigned) in one transaction: all of them or none."""
        if events:
            await self._run(_append_events, [encode_event(event) for event in events])

    async def events(
        self, rollout_id: str, *, after_seq: int, limit: int
    ) -> builtins.list[RolloutEvent]:
        """Up to `limit` events of one rollout with seq > after_seq, in order."""
        return await self._run(_events, rollout_id, after_seq, max(limit, 0))

    async def follow_events(
        self, rollout_id: str, *, after_seq: int
    ) -> AsyncIterator[RolloutEvent]:
        """Nothing: SQLite tells no server of another's writes (servers sharing a file each
        watch only the rollouts they run)."""
        return
        yield

    async def request_cancel(self, rollout_id: str, reason: str) -> bool:
        """False: no other server runs a rollout of a SQLite file this one can reach."""
        return False

    def on_cancel_request(self, handler: Callable[[str, str], None]) -> None:
        """Nothing: no other server sends this one cancel requests."""

    async def advertise(self, address: str) -> None:
        """Nothing: no other server forwards calls to this one."""

    async def holder(self, rollout_id: str) -> Holder | None:
        """None: no other server runs a rollout of a SQLite file this one can reach."""
        return None

    def on_lease_lost(self, handler: LeaseLostHandler) -> None:
        """Nothing: a server alone on its file holds no lease to lose."""

    async def follow_others(self) -> AsyncIterator[RolloutEvent]:
        """Nothing: SQLite tells no server of another's writes."""
        return
        yield

    async def follow_group(self, group_id: str) -> AsyncIterator[Group]:
        """The stored group, once: no other server tells this one of its changes."""
        group = await self.get_group(group_id)
        if group is not None:
            yield group

    async def request_group_cancel(self, group_id: str, reason: str) -> bool:
        """False: no other server runs a group of a SQLite file this one can reach."""
        return False

    def on_group_cancel_request(self, handler: Callable[[str, str], None]) -> None:
        """Nothing: no other server sends this one cancel requests."""

    async def insert_group(self, group: Group, *, secret_free: bool) -> Group:
        """Insert a new group; if its tenant already used its request_id, that group instead."""
        return await self._run(_in_transaction, groups.insert_group, group, secret_free)

    async def save_group(self, group: Group) -> None:
        await self._run(_in_transaction, groups.save_group, group)

    async def get_group(self, group_id: str) -> Group | None:
        return await self._run(groups.get_group, group_id)

    async def find_group(self, request_id: str, *, tenant: str) -> Group | None:
        return await self._run(groups.find_group, request_id, tenant)

    async def unfinished_groups(self) -> builtins.list[groups.StoredGroup]:
        """Groups a previous server left running, oldest first."""
        return await self._run(groups.unfinished_groups)

    async def list_groups(
        self,
        *,
        labels: Mapping[str, str],
        statuses: Sequence[GroupStatus],
        page_size: int,
        page_token: str,
        tenant: str | None = None,
        take: Callable[[Group], bool] | None = None,
    ) -> GroupPage:
        """Groups newest first, of one tenant or (None) of all (`read_page`).

        Raises SpecError naming "page_size" or "page_token".
        """

        async def page_keys(after: tuple[int, str] | None, limit: int) -> list[tuple[int, str]]:
            return await self._run(sqlite_page_keys, dict(labels), statuses, tenant, after, limit)

        async def read(group_id: str) -> Group:
            return await self._run(sqlite_listed_group, group_id)

        return await read_page(page_size, page_token, page_keys, read, take)

    async def _run(
        self, fn: Callable[Concatenate[sqlite3.Connection, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        if self._conn is None:
            raise RuntimeError(f"store {self.path} is not open")
        return await self._submit(fn, self._conn, *args, **kwargs)

    async def _submit(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        assert self._executor is not None
        call = functools.partial(fn, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)


def _connect(path: Path) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    # Autocommit mode: transactions are explicit (`_write`), reads are single statements.
    conn = sqlite3.connect(path, isolation_level=None, timeout=_BUSY_TIMEOUT_S)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        # In WAL mode NORMAL survives a crash of this process; only power loss may drop the
        # last commits, a fair price for not syncing on every event.
        conn.execute("PRAGMA synchronous = NORMAL")
        migrate(conn)
        conn.execute("PRAGMA foreign_keys = ON")
    except BaseException:
        conn.close()
        raise
    return conn


@contextmanager
def _write(conn: sqlite3.Connection) -> Iterator[None]:
    """One write transaction, taking the file's write lock up front (no upgrade deadlocks)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _insert(
    conn: sqlite3.Connection, values: tuple[Any, ...], labels: list[tuple[Any, ...]]
) -> Rollout | None:
    """Insert the row; None when it was new, else the rollout already holding its keys."""
    rollout_id, tenant, request_id = values[:3]
    with _write(conn):
        inserted = conn.execute(
            "INSERT INTO rollouts (id, tenant, request_id, status, phase, create_us, create_time,"
            " start_time, finish_time, spec, result, group_id, member_index)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT DO NOTHING",
            values,
        ).rowcount
        if inserted:
            conn.executemany(
                "INSERT INTO rollout_labels (key, value, create_us, rollout_id)"
                " VALUES (?, ?, ?, ?)",
                labels,
            )
            return None
        # The conflict was on (tenant, request_id), or else on the id itself.
        row = request_id and _select_by_request_id(conn, tenant, request_id)
        row = row or _select_one(conn, "id", rollout_id)
    return decode_rollout(row)


def _in_transaction(conn: sqlite3.Connection, write: Callable[..., T], *args: Any) -> T:
    with _write(conn):
        return write(conn, *args)


def _select_one(conn: sqlite3.Connection, column: str, value: str) -> Any:
    query = f"SELECT {ROLLOUT_COLUMNS} FROM rollouts WHERE {column} = ?"
    return conn.execute(query, (value,)).fetchone()


def _select_by_request_id(conn: sqlite3.Connection, tenant: str, request_id: str) -> Any:
    query = f"SELECT {ROLLOUT_COLUMNS} FROM rollouts WHERE tenant = ? AND request_id = ?"
    return conn.execute(query, (tenant, request_id)).fetchone()


def _find_by_request_id(conn: sqlite3.Connection, tenant: str, request_id: str) -> Rollout | None:
    row = _select_by_request_id(conn, tenant, request_id)
    return None if row is None else decode_rollout(row)


def _save(conn: sqlite3.Connection, values: tuple[Any, ...]) -> bool:
    cursor = conn.execute(
        "UPDATE rollouts SET status = ?, phase = ?, start_time = ?, finish_time = ?, result = ?"
        " WHERE id = ?",
        values,
    )
    return cursor.rowcount == 1


def _get(conn: sqlite3.Connection, column: str, value: str) -> Rollout | None:
    row = _select_one(conn, column, value)
    return None if row is None else decode_rollout(row)


def _page_keys(
    conn: sqlite3.Connection,
    labels: dict[str, str],
    statuses: list[str],
    tenant: str | None,
    after: tuple[int, str] | None,
    limit: int,
) -> list[tuple[int, str]]:
    query, params = page_query(labels, statuses, after, limit, tenant=tenant)
    return conn.execute(query, params).fetchall()


def _listed(conn: sqlite3.Connection, rollout_id: str, slim: bool) -> Rollout:
    if not slim:
        return decode_rollout(_select_one(conn, "id", rollout_id))
    query = f"SELECT {SLIM_ROLLOUT_COLUMNS} FROM rollouts WHERE id = ?"
    return decode_slim_rollout(conn.execute(query, (rollout_id,)).fetchone())


def _non_terminal(conn: sqlite3.Connection) -> list[Rollout]:
    # Named (not NOT IN terminal) so the status index finds the few among many.
    live = [status.value for status in RolloutStatus if status not in TERMINAL_STATUSES]
    rows = conn.execute(
        f"SELECT {ROLLOUT_COLUMNS} FROM rollouts"
        f" WHERE status IN ({', '.join('?' * len(live))}) ORDER BY create_us, id",
        live,
    ).fetchall()
    return [decode_rollout(row) for row in rows]


def _append_events(conn: sqlite3.Connection, rows: list[tuple[str, int, str, str, str]]) -> None:
    try:
        with _write(conn):
            conn.executemany(
                "INSERT INTO events (rollout_id, seq, time, kind, payload) VALUES (?, ?, ?, ?, ?)",
                rows,
            )
    except sqlite3.IntegrityError as exc:
        if exc.sqlite_errorname == "SQLITE_CONSTRAINT_FOREIGNKEY":
            ids = sorted({row[0] for row in rows})
            raise NotFoundError(f"events for unknown rollouts among {ids}") from exc
        raise ValueError(f"an event's (rollout_id, seq) is already stored: {exc}") from exc


def _events(
    conn: sqlite3.Connection, rollout_id: str, after_seq: int, limit: int
) -> list[RolloutEvent]:
    rows = conn.execute(
        "SELECT seq, time, kind, payload FROM events WHERE rollout_id = ? AND seq > ?"
        " ORDER BY seq LIMIT ?",
        (rollout_id, after_seq, limit),
    ).fetchall()
    if not rows:
        return []
    labels = dict(
        conn.execute(
            "SELECT key, value FROM rollout_labels WHERE rollout_id = ?", (rollout_id,)
        ).fetchall()
    )
    (tenant,) = conn.execute("SELECT tenant FROM rollouts WHERE id = ?", (rollout_id,)).fetchone()
    return [decode_event(rollout_id, row, labels, tenant) for row in rows]
