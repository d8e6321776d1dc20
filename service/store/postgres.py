"""`PostgresStore`: the `RolloutStore` (and `GroupStore`) on a PostgreSQL server.

Chosen by ROLLOUT_DATABASE_URL (a postgresql:// DSN), so that several servers can share one
database. psycopg 3 talks to it through a small pool of async connections (the lease's
heartbeat has one of its own, `postgres_leases`); every write that touches more than one row
is one transaction. The schema is migrated at `open` by yoyo
(service/store/postgres_migrations/*.sql, applied under yoyo's lock, so replicas starting
together migrate once). Rows hold the same values as SQLite's (`rows.py`), plus the slim spec and
result written beside the full ones, so that a slim list reads no bulk.

Cross-server watch: `append_events` notifies the rollouts it wrote to, and `follow_events`
readers on every server wake up and read the new rows (`postgres_notify`). Leases say which
server runs what, and what a dead one left (`postgres_leases`). `request_cancel` records a
cancel of a rollout another live server runs and notifies that server's run, which takes the
request (deletes it: one handling each) when notified and every POLL_S, in case the
notification was lost, and hands it to its handler (`on_cancel_request`), which cancels it
there; `request_group_cancel` does the same for a group.
`save_group` notifies the group, so that `follow_group` readers on every server see it change;
`follow_others` hands a label-wide watcher the events other servers store.

The DSN may carry a password: it is never put in an error, a log line or a repr.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn

import psycopg
from psycopg import AsyncConnection, errors
from psycopg_pool import AsyncConnectionPool

from service.errors import NotFoundError
from service.models import (
    TERMINAL_STATUSES,
    Group,
    GroupStatus,
    PhaseChanged,
    Rollout,
    RolloutEvent,
    RolloutStatus,
)
from service.store.base import (
    RESTARTED,
    FencedError,
    Holder,
    Interrupted,
    LeaseLostHandler,
    RolloutPage,
    TakeRollout,
)
from service.store.codec import decode_model, encode_model
from service.store.group_listing import GroupPage, group_label_rows, group_page_query
from service.store.groups import StoredGroup
from service.store.listing import page_query
from service.store.pages import read_page
from service.store.postgres_leases import EXPIRE_SQL, Lease, claim_groups, claim_rollouts
from service.store.postgres_notify import (
    GROUP_NOTIFY_SQL,
    NOTIFY_SQL,
    POLL_S,
    CancelHandler,
    Notices,
    Reconnected,
)
from service.store.rows import (
    ROLLOUT_COLUMNS,
    decode_event,
    decode_rollout,
    encode_event,
    encode_insert,
    encode_labels,
    encode_save,
    epoch_us,
    redacted,
)

__all__ = ["MIGRATIONS_DIR", "PostgresStore", "migrate"]

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).with_name("postgres_migrations")
"""yoyo's migrations, one .sql file per step, applied in name order."""

_POOL_SIZE = 8
"""Connections per server: statements are short, so a few serve many concurrent rollouts."""
_FOLLOW_PAGE = 500
_SLIM_COLUMNS = ROLLOUT_COLUMNS.replace("spec, result", "slim_spec, slim_result")
"""ROLLOUT_COLUMNS with the slim documents: `decode_rollout` reads the slim rollout from it."""
_CANCEL_SQL = (
    "WITH live AS (SELECT rollouts.owner FROM rollouts"
    " JOIN servers ON servers.owner = rollouts.owner"
    " WHERE rollouts.id = %(id)s AND rollouts.status <> ALL(%(terminal)s)"
    " AND rollouts.owner <> %(owner)s"
    " AND servers.heartbeat_at > now() - make_interval(secs => %(lease_s)s)),"
    " recorded AS (INSERT INTO cancel_requests (rollout_id, reason)"
    " SELECT %(id)s::text, %(reason)s::text FROM live ON CONFLICT DO NOTHING)"
    " SELECT pg_notify('rollout_cancel_' || owner,"
    " json_build_object('id', %(id)s::text, 'reason', %(reason)s::text)::text) FROM live"
)
"""Record a cancel request for the live run that owns an unfinished rollout (the first reason
of those pending wins) and notify that run (`cancel_channel`); one row if there is one. The
payload is only read by servers from before the requests were taken from the table (a rolling
upgrade)."""
_HOLDER_SQL = (
    "SELECT rollouts.instance, servers.address FROM rollouts"
    " JOIN servers ON servers.owner = rollouts.owner"
    " WHERE rollouts.id = %(id)s AND rollouts.status <> ALL(%(terminal)s)"
    " AND rollouts.owner <> %(owner)s"
    " AND servers.heartbeat_at > now() - make_interval(secs => %(lease_s)s)"
)
"""The live run (not this one) that runs an unfinished rollout: its instance and address."""
_GROUP_CANCEL_SQL = (
    "WITH live AS (SELECT groups.owner FROM groups JOIN servers ON servers.owner = groups.owner"
    " WHERE groups.id = %(id)s AND groups.status = %(running)s AND groups.owner <> %(owner)s"
    " AND servers.heartbeat_at > now() - make_interval(secs => %(lease_s)s)),"
    " recorded AS (INSERT INTO group_cancel_requests (group_id, reason)"
    " SELECT %(id)s::text, %(reason)s::text FROM live ON CONFLICT DO NOTHING)"
    " SELECT pg_notify('rollout_cancel_' || owner,"
    " json_build_object('group', %(id)s::text, 'reason', %(reason)s::text)::text) FROM live"
)
"""`_CANCEL_SQL` for a running group."""
_TAKE_CANCELS_SQL = (
    "DELETE FROM cancel_requests USING rollouts WHERE rollouts.id = cancel_requests.rollout_id"
    " AND rollouts.owner = %s RETURNING rollout_id, reason"
)
"""Take (delete) the cancel requests of the rollouts this run owns: each is taken once."""
_TAKE_GROUP_CANCELS_SQL = (
    "DELETE FROM group_cancel_requests USING groups"
    " WHERE groups.id = group_cancel_requests.group_id AND groups.owner = %s"
    " RETURNING group_id, reason"
)
"""`_TAKE_CANCELS_SQL` for groups."""
_APPEND_SQL = (
    "WITH owners AS (SELECT id, owner FROM rollouts WHERE id = ANY(%(ids)s) FOR SHARE),"
    " allowed AS (SELECT count(*) = cardinality(%(ids)s::text[])"
    " AND coalesce(bool_and(owner = %(owner)s), false) AS yes FROM owners),"
    " stored AS (INSERT INTO events (rollout_id, seq, time, kind, payload)"
    " SELECT * FROM unnest(%(rollout_ids)s::text[], %(seqs)s::bigint[], %(times)s::text[],"
    " %(kinds)s::text[], %(payloads)s::text[]) WHERE (SELECT yes FROM allowed)),"
    " phased AS (UPDATE rollouts SET status = change.status, phase = change.phase"
    " FROM (SELECT DISTINCT ON (id) id, status, phase FROM unnest(%(changed)s::text[],"
    " %(statuses)s::text[], %(phases)s::text[]) WITH ORDINALITY AS c(id, status, phase, n)"
    " ORDER BY id, n DESC) AS change WHERE rollouts.id = change.id"
    " AND rollouts.status <> ALL(%(terminal)s) AND (SELECT yes FROM allowed)),"
    f" notified AS ({NOTIFY_SQL} WHERE (SELECT yes FROM allowed))"
    " SELECT id, owner, (SELECT count(*) FROM notified) FROM owners"
)
"""`append_events` in one statement (one round trip, its own transaction): lock the rollouts'
rows (FOR SHARE: a takeover's claim waits for this commit), and only if all exist and this run
owns them all, insert the events, set each rollout's status and phase from its last
PhaseChanged (unless the row is already terminal: the final save may come first), and notify
them; returns (id, owner) of the rows found, for the caller to tell why it stored nothing."""
_ENDED_KEPT = 10_000
"""Ended rollouts `follow_others` remembers, so that a late notification reads nothing again."""
_OTHERS_RUNNING = (
    "SELECT id, (SELECT max(seq) FROM events WHERE events.rollout_id = rollouts.id)"
    " FROM rollouts WHERE status <> ALL(%s) AND owner <> %s"
)
"""The unfinished rollouts other runs own, with their last seq (None: no event yet)."""
_OTHERS_ENDED_SINCE = (
    "SELECT id FROM rollouts WHERE status = ANY(%s) AND owner <> %s"
    " AND finish_time::timestamptz >= to_timestamp(%s) ORDER BY create_us, id"
)
"""The rollouts other runs ended since a time (epoch seconds), oldest first."""
_CLOCK_SLACK_S = 10.0
"""How far servers' clocks (which stamp finish_time) may be behind this one's."""


class PostgresStore:
    """Rollouts, their events and groups in the PostgreSQL database at `url` (postgresql:// or
    postgres://, as `Settings.database_url` checks), for one run of the server named `server`
    (the same across its restarts; it may show a path) and `instance` (`Settings.instance_id`,
    what clients may read), whose lease expires `lease_s` after its last heartbeat."""

    def __init__(
        self, url: str, *, server: str, instance: str = "default", lease_s: float = 30.0
    ) -> None:
        self._url = url
        self._lease = Lease(
            uuid.uuid4().hex, server, instance, lease_s, self._lease_lost, self._lease_expired
        )
        self._pool: AsyncConnectionPool | None = None
        self._notices = Notices(self._lease.owner)
        self._on_lost: list[LeaseLostHandler] = []
        self._on_cancel: CancelHandler | None = None
        self._on_group_cancel: CancelHandler | None = None
        self._taking: asyncio.Task[None] | None = None

    @property
    def _owner(self) -> str:
        """This run's owner id: its current lease's (a new one once it lost the first)."""
        return self._lease.owner

    def __repr__(self) -> str:
        return "PostgresStore(<url hidden>)"

    async def open(self) -> None:
        """Migrate the schema to this code's version, then connect the pool."""
        if self._pool is not None:
            raise RuntimeError("store is already open")
        await asyncio.to_thread(migrate, self._url)
        pool = AsyncConnectionPool(
            self._url, min_size=1, max_size=_POOL_SIZE, kwargs={"autocommit": True}, open=False
        )
        await pool.open(wait=True)
        self._pool = pool
        await self._lease.take(self._url)
        await self._notices.start(self._url, self._owner)
        self._taking = asyncio.create_task(self._take_cancels(), name="postgres-cancels")

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        taking, self._taking = self._taking, None
        if taking is not None:
            taking.cancel()
            await asyncio.gather(taking, return_exceptions=True)
        await self._notices.stop()
        if pool is not None:
            try:
                await self._lease.release(pool)
            finally:
                await pool.close()

    async def __aenter__(self) -> PostgresStore:
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
        lease = self._lease
        values = (
            *encode_insert(stored),
            *_encode_slim(stored),
            lease.owner,
            lease.server,
            lease.instance,
        )
        rollout_id, tenant, request_id = values[:3]
        async with self._connection() as conn, conn.transaction():
            cursor = await conn.execute(
                "INSERT INTO rollouts (id, tenant, request_id, status, phase, create_us,"
                " create_time, start_time, finish_time, spec, result, group_id, member_index,"
                " slim_spec, slim_result, owner, server, instance) VALUES"
                " (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT DO NOTHING",
                values,
            )
            if cursor.rowcount:
                await cursor.executemany(
                    "INSERT INTO rollout_labels (key, value, create_us, rollout_id)"
                    " VALUES (%s, %s, %s, %s)",
                    encode_labels(stored),
                )
                return stored
        # The conflict was on (tenant, request_id), or else on the id itself; the row that won
        # is committed by now (ours waited for it).
        existing = await self.find_by_request_id(request_id or "", tenant=tenant)
        existing = existing or await self.get(rollout_id)
        assert existing is not None, "a conflicting rollout is never deleted"
        return existing

    async def save(self, rollout: Rollout) -> None:
        """Overwrite an existing rollout's status, phase, result and times (never its spec),
        if this run still owns it (FencedError if another took it over)."""
        async with self._connection() as conn:
            cursor = await conn.execute(
                "UPDATE rollouts SET status = %s, phase = %s, start_time = %s,"
                " finish_time = %s, result = %s, slim_result = %s WHERE id = %s AND owner = %s",
                (*encode_save(rollout)[:-1], _encode_slim(rollout)[1], rollout.id, self._owner),
            )
        if cursor.rowcount != 1:
            await self._refused("rollouts", rollout.id)

    async def get(self, rollout_id: str) -> Rollout | None:
        row = await self._one(f"SELECT {ROLLOUT_COLUMNS} FROM rollouts WHERE id = %s", rollout_id)
        return None if row is None else decode_rollout(row)

    async def find_by_request_id(self, request_id: str, *, tenant: str = "") -> Rollout | None:
        """The rollout `tenant` inserted with this (non-empty) request_id, if any."""
        if not request_id:
            return None
        row = await self._one(
            f"SELECT {ROLLOUT_COLUMNS} FROM rollouts WHERE tenant = %s AND request_id = %s",
            tenant,
            request_id,
        )
        return None if row is None else decode_rollout(row)

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
        columns = _SLIM_COLUMNS if slim else ROLLOUT_COLUMNS

        async def page_keys(after: tuple[int, str] | None, limit: int) -> list[tuple[int, str]]:
            query, params = page_query(labels, status_values, after, limit, tenant=tenant)
            return [(key[0], key[1]) for key in await self._all(_placeholders(query), *params)]

        async def read(rollout_id: str) -> Rollout:
            row = await self._one(f"SELECT {columns} FROM rollouts WHERE id = %s", rollout_id)
            return decode_rollout(row)

        return await read_page(page_size, page_token, page_keys, read, take)

    async def non_terminal(self) -> builtins.list[Interrupted]:
        """Unfinished rollouts of gone server runs (an earlier run of this server, a replica
        whose lease expired), oldest first, taken over by this run; never this run's own or a
        live replica's (`postgres_leases`)."""
        live = [status.value for status in RolloutStatus if status not in TERMINAL_STATUSES]
        rows = await self._claim(claim_rollouts(ROLLOUT_COLUMNS), self._lease.params(live=live))
        return [
            Interrupted(decode_rollout(row[4:]), self._interrupted(*row[:3]))
            for row in sorted(rows, key=lambda row: row[3:5])
        ]

    def _interrupted(self, owner: str, server: str, instance: str) -> str:
        """Why a rollout taken from the run `owner` of `server` (`instance`) ended: that server
        restarted (this one, in a new run), or it stopped renewing its lease (another server, or
        this one's run that lost its lease) and this one ended the rollout. Servers are named
        by instance id: their server name shows their host and state folder to clients."""
        if server == self._lease.server and owner not in self._lease.lost:
            return RESTARTED
        named = f" ({instance})" if instance else ""
        return (
            f"interrupted: its server{named} stopped renewing its lease;"
            f" ended by {self._lease.instance}"
        )

    async def append_events(self, events: Sequence[RolloutEvent]) -> None:
        """Append events (seq already assigned) in one statement (`_APPEND_SQL`): all of them
        or none.

        A `PhaseChanged` also sets its rollout's row's status and phase (unless the row is
        already terminal: the final save may come first), so that every server reads a
        running rollout as it is; its server saves the rest when it ends.
        """
        if not events:
            return
        rows = [encode_event(event) for event in events]
        changes = _phase_changes(events)
        ids = sorted({row[0] for row in rows})
        params = {
            "ids": ids,
            "owner": self._owner,
            "rollout_ids": [row[0] for row in rows],
            "seqs": [row[1] for row in rows],
            "times": [row[2] for row in rows],
            "kinds": [row[3] for row in rows],
            "payloads": [row[4] for row in rows],
            "changed": [change[0] for change in changes],
            "statuses": [change[1] for change in changes],
            "phases": [change[2] for change in changes],
            "terminal": [status.value for status in TERMINAL_STATUSES],
        }
        try:
            async with self._connection() as conn:
                cursor = await conn.execute(_APPEND_SQL, params)
                owners = {row[0]: row[1] for row in await cursor.fetchall()}
        except errors.UniqueViolation as exc:
            raise ValueError(f"an event's (rollout_id, seq) is already stored: {exc}") from exc
        if len(owners) < len(ids):
            raise NotFoundError(f"events for unknown rollouts among {ids}")
        fenced = [rollout_id for rollout_id in ids if owners[rollout_id] != self._owner]
        if fenced:
            self._lease.check()
            raise FencedError(fenced)

    async def events(
        self, rollout_id: str, *, after_seq: int, limit: int
    ) -> builtins.list[RolloutEvent]:
        """Up to `limit` events of one rollout with seq > after_seq, in order."""
        rows = await self._all(
            "SELECT seq, time, kind, payload FROM events WHERE rollout_id = %s AND seq > %s"
            " ORDER BY seq LIMIT %s",
            rollout_id,
            after_seq,
            max(limit, 0),
        )
        if not rows:
            return []
        labels = await self._all(
            "SELECT key, value FROM rollout_labels WHERE rollout_id = %s", rollout_id
        )
        (tenant,) = await self._one("SELECT tenant FROM rollouts WHERE id = %s", rollout_id)
        return [decode_event(rollout_id, (*row,), dict(labels), tenant) for row in rows]

    async def follow_events(
        self, rollout_id: str, *, after_seq: int
    ) -> AsyncIterator[RolloutEvent]:
        """The rollout's events after `after_seq` as any server stores them, until the final
        one: read, then wait for a notification (or `POLL_S`) and read again."""
        with self._notices.following(rollout_id) as wake:
            while True:
                wake.clear()
                page = await self.events(rollout_id, after_seq=after_seq, limit=_FOLLOW_PAGE)
                for event in page:
                    yield event
                    if event.is_final:
                        return
                if page:
                    after_seq = page[-1].seq
                    continue
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), POLL_S)

    async def request_cancel(self, rollout_id: str, reason: str) -> bool:
        """Ask the live server run that runs this unfinished rollout (not this one) to cancel
        it: record the request (the first reason wins until that run takes it) and notify that
        run, in one transaction. False if no live run owns it (its lease expired: the takeover
        ends it)."""
        terminal = [status.value for status in TERMINAL_STATUSES]
        params = self._lease.params(id=rollout_id, reason=reason, terminal=terminal)
        return await self._ask_owner(_CANCEL_SQL, params)

    async def advertise(self, address: str) -> None:
        """Put where this run's API is reached in its lease, for replicas to forward to."""
        if self._pool is None:
            raise RuntimeError("store is not open")
        await self._lease.advertise(self._pool, address)

    async def holder(self, rollout_id: str) -> Holder | None:
        """The live run, not this one, that runs this unfinished rollout (None: none)."""
        terminal = [status.value for status in TERMINAL_STATUSES]
        async with self._connection() as conn:
            cursor = await conn.execute(
                _HOLDER_SQL, self._lease.params(id=rollout_id, terminal=terminal)
            )
            row = await cursor.fetchone()
        return None if row is None else Holder(instance=row[0], address=row[1])

    def on_cancel_request(self, handler: CancelHandler) -> None:
        """Have `handler` cancel the rollouts other servers ask this run to cancel (requests are
        kept until a handler is set)."""
        self._on_cancel = handler
        self._notices.cancel_requested.set()

    async def _ask_owner(self, query: str, params: dict[str, Any]) -> bool:
        """Run `_CANCEL_SQL` or `_GROUP_CANCEL_SQL`: whether a live run owns the row."""
        async with self._connection() as conn:
            cursor = await conn.execute(query, params)
            return bool(await cursor.fetchall())

    async def _take_cancels(self) -> None:
        """Take this run's cancel requests when notified of one, and every POLL_S in case a
        notification was lost (the listening connection was down), for as long as it is open."""
        wake = self._notices.cancel_requested
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), POLL_S)
            wake.clear()
            for query, handler in (
                (_TAKE_CANCELS_SQL, self._on_cancel),
                (_TAKE_GROUP_CANCELS_SQL, self._on_group_cancel),
            ):
                if handler is None:
                    continue
                try:
                    taken = await self._all(query, self._owner)
                except psycopg.Error as exc:  # the requests stay recorded: the next look takes them
                    log.warning("could not read this server's cancel requests: %s", exc)
                    continue
                for row_id, reason in taken:
                    try:
                        handler(row_id, reason)
                    except Exception:
                        log.exception("could not handle a cancel request")

    async def follow_others(self) -> AsyncIterator[RolloutEvent]:
        """The events other server runs store from now on, in order per rollout, as they store
        them; runs until cancelled. A rollout this run owns is left out (its events are this
        server's own); one that was running at the call starts after the events stored by then.
        Every POLL_S without a notification it looks at what other runs run, in case one was
        lost; once notifications flow again after a gap (`Reconnected`), it also reads the
        rollouts other runs ended since the last notification before it (those that began and
        ended within it). A round whose reads fail (the database away) is a gap too: the next
        rounds read what ended since the last round that read everything, until one does."""
        terminal = [status.value for status in TERMINAL_STATUSES]
        started = read_at = time.time()
        failed_since: float | None = None
        with self._notices.following_all() as notes:
            after = {
                rollout_id: seq or 0
                for rollout_id, seq in await self._all(_OTHERS_RUNNING, terminal, self._owner)
            }
            ended: dict[str, None] = {}
            while True:
                try:
                    async with asyncio.timeout(POLL_S):
                        noted = [await notes.get()]
                    while not notes.empty():  # one read per rollout however many notifications
                        noted.append(notes.get_nowait())
                except TimeoutError:
                    noted = []
                due = [note for note in noted if isinstance(note, str)]
                gaps = [note.since for note in noted if isinstance(note, Reconnected)]
                gaps += [] if failed_since is None else [failed_since]
                round_at = time.time()
                try:
                    async for event in self._others_round(
                        due, gaps, polled=not noted, after=after, ended=ended, started=started
                    ):
                        yield event
                except psycopg.Error as exc:
                    if failed_since is None:
                        log.warning("could not read other servers' events (%s); trying again", exc)
                        failed_since = read_at
                    continue
                failed_since, read_at = None, round_at

    async def _others_round(
        self,
        due: builtins.list[str],
        gaps: builtins.list[float],
        *,
        polled: bool,
        after: dict[str, int],
        ended: dict[str, None],
        started: float,
    ) -> AsyncIterator[RolloutEvent]:
        """One round of `follow_others`: the new events of the rollouts notified (`due`), of
        those a look at what other runs run finds (after a gap, or POLL_S without a
        notification), and, after gaps, of those other runs ended since the earliest."""
        terminal = [status.value for status in TERMINAL_STATUSES]
        if gaps or polled:
            running = dict(await self._all(_OTHERS_RUNNING, terminal, self._owner))
            due = due + [rollout_id for rollout_id in after if rollout_id not in running]
            due += [r for r, seq in running.items() if (seq or 0) > after.get(r, 0)]
        if gaps:
            since = max(min(gaps), started) - _CLOCK_SLACK_S
            missed = await self._all(_OTHERS_ENDED_SINCE, terminal, self._owner, since)
            due += [rollout_id for (rollout_id,) in missed]
        for rollout_id in dict.fromkeys(due):
            if rollout_id in ended:
                continue
            row = await self._one("SELECT owner FROM rollouts WHERE id = %s", rollout_id)
            if row is None or row[0] == self._owner:  # taken over by this run
                after.pop(rollout_id, None)
                continue
            async for event in self._events_after(rollout_id, after, ended):
                yield event

    async def _events_after(
        self, rollout_id: str, after: dict[str, int], ended: dict[str, None]
    ) -> AsyncIterator[RolloutEvent]:
        """`follow_others`' read of one rollout: its events after `after`'s seq, which moves
        on; at its final event, from `after` to `ended` (the newest _ENDED_KEPT)."""
        while True:
            page = await self.events(
                rollout_id, after_seq=after.get(rollout_id, 0), limit=_FOLLOW_PAGE
            )
            for event in page:
                yield event
            if not page:
                return
            after[rollout_id] = page[-1].seq
            if page[-1].is_final:
                del after[rollout_id]
                ended[rollout_id] = None
                if len(ended) > _ENDED_KEPT:
                    del ended[next(iter(ended))]
                return

    async def insert_group(self, group: Group, *, secret_free: bool) -> Group:
        """Insert a new group; if its tenant already used its request_id, that group instead."""
        request_id = group.spec.spec.request_id or None
        async with self._connection() as conn, conn.transaction():
            cursor = await conn.execute(
                "INSERT INTO groups (id, tenant, request_id, status, create_us, secret_free,"
                " document, owner) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (
                    group.id,
                    group.tenant,
                    request_id,
                    group.status.value,
                    epoch_us(group.create_time),
                    secret_free,
                    encode_model(group),
                    self._owner,
                ),
            )
            if cursor.rowcount:
                await cursor.executemany(
                    "INSERT INTO group_labels (key, value, create_us, group_id)"
                    " VALUES (%s, %s, %s, %s)",
                    group_label_rows(group),
                )
                return group
        existing = await self.find_group(request_id or "", tenant=group.tenant)
        existing = existing or await self.get_group(group.id)
        assert existing is not None, "a conflicting group is never deleted"
        return existing

    async def save_group(self, group: Group) -> None:
        """Overwrite the group and notify its followers on every server, in one transaction,
        if this run still owns it (FencedError if another took it over)."""
        async with self._connection() as conn, conn.transaction():
            cursor = await conn.execute(
                "UPDATE groups SET status = %s, document = %s WHERE id = %s AND owner = %s",
                (group.status.value, encode_model(group), group.id, self._owner),
            )
            if cursor.rowcount == 1:
                await conn.execute(GROUP_NOTIFY_SQL, (group.id,))
                return
        await self._refused("groups", group.id)

    def on_lease_lost(self, handler: LeaseLostHandler) -> None:
        """Have `handler` stop this run's work when its lease is lost (`postgres_leases`)."""
        self._on_lost.append(handler)

    async def _lease_lost(self, lost: str) -> None:
        """The lease `lost` was taken (this run missed its heartbeats for a whole lease and a
        replica took its work over); the lease now held is new. Hear cancel requests on the
        new one's channel, then stop what ran under the lost one (its writes are refused
        already: no row has the new owner)."""
        await self._notices.stop()
        try:
            await self._notices.start(self._url, self._owner)
        except psycopg.OperationalError as exc:  # followers still read every POLL_S
            log.warning("not listening for other servers' events or cancel requests: %s", exc)
        stopped = self._stop_runs()
        log.error(
            "lost this server's database lease: no heartbeat for over %gs, another replica "
            "takes over what it ran; stopped %d rollouts and groups without saving them; "
            "new work runs under a new lease",
            self._lease.lease_s,
            stopped,
        )

    def _lease_expired(self) -> None:
        """This run could not renew its lease for a whole lease by its own clock: a replica may
        be taking its work over, so stop it now, without the database (`postgres_leases`)."""
        stopped = self._stop_runs()
        log.error(
            "could not reach the database for %gs since this server's lease was last renewed: "
            "another replica may take over what it ran; stopped %d rollouts and groups without "
            "saving them",
            self._lease.lease_s,
            stopped,
        )

    def _stop_runs(self) -> int:
        """Call the handlers of a lost lease; how many runs they stopped."""
        stopped = 0
        for handler in self._on_lost:
            try:
                stopped += handler()
            except Exception:
                log.exception("stopping the work of a lost lease failed")
        return stopped

    async def _refused(self, table: str, row_id: str) -> NoReturn:
        """Why a write guarded on ownership changed no row: the row is missing, or another run
        took it over (the lease may be lost: renew at once to find out)."""
        row = await self._one(f"SELECT owner FROM {table} WHERE id = %s", row_id)
        if row is None:
            raise NotFoundError(f"no {table[:-1]} {row_id!r} to save")
        self._lease.check()
        raise FencedError([row_id])

    async def follow_group(self, group_id: str) -> AsyncIterator[Group]:
        """The stored group now, then again each time a server saves a change to it, until it
        is terminal (read on each notification, and every POLL_S in case one was lost)."""
        with self._notices.following(group_id) as wake:
            last = None
            while True:
                wake.clear()
                row = await self._one("SELECT document FROM groups WHERE id = %s", group_id)
                if row is None:
                    return
                group = decode_model(Group, row[0])
                if row[0] != last:
                    last = row[0]
                    yield group
                if group.terminal:
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), POLL_S)

    async def request_group_cancel(self, group_id: str, reason: str) -> bool:
        """Ask the live server run that runs this group (not this one) to cancel it; False if
        no live run does (its lease expired: the takeover resumes it, and it can be cancelled
        there)."""
        params = self._lease.params(id=group_id, reason=reason, running=GroupStatus.RUNNING.value)
        return await self._ask_owner(_GROUP_CANCEL_SQL, params)

    def on_group_cancel_request(self, handler: CancelHandler) -> None:
        """Have `handler` cancel the groups other servers ask this run to cancel (requests are
        kept until a handler is set)."""
        self._on_group_cancel = handler
        self._notices.cancel_requested.set()

    async def get_group(self, group_id: str) -> Group | None:
        row = await self._one("SELECT document FROM groups WHERE id = %s", group_id)
        return None if row is None else decode_model(Group, row[0])

    async def find_group(self, request_id: str, *, tenant: str) -> Group | None:
        if not request_id:
            return None
        row = await self._one(
            "SELECT document FROM groups WHERE tenant = %s AND request_id = %s", tenant, request_id
        )
        return None if row is None else decode_model(Group, row[0])

    async def unfinished_groups(self) -> builtins.list[StoredGroup]:
        """Running groups of gone server runs, oldest first, taken over by this run."""
        live = [status.value for status in RolloutStatus if status not in TERMINAL_STATUSES]
        params = self._lease.params(running=GroupStatus.RUNNING.value, live=live)
        rows = await self._claim(claim_groups(), params)
        return [(decode_model(Group, row[2]), row[3]) for row in sorted(rows, key=lambda r: r[:2])]

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
            query, params = group_page_query(labels, statuses, after, limit, tenant=tenant)
            return [(key[0], key[1]) for key in await self._all(_placeholders(query), *params)]

        async def read(group_id: str) -> Group:
            row = await self._one("SELECT document FROM groups WHERE id = %s", group_id)
            return decode_model(Group, row[0])

        return await read_page(page_size, page_token, page_keys, read, take)

    def _connection(self) -> AbstractAsyncContextManager[AsyncConnection[Any]]:
        """A pooled connection (autocommit) for the `async with` block."""
        if self._pool is None:
            raise RuntimeError("store is not open")
        return self._pool.connection()

    async def _one(self, query: str, *params: Any) -> Any:
        async with self._connection() as conn:
            cursor = await conn.execute(query, params)
            return await cursor.fetchone()

    async def _claim(self, query: str, params: dict[str, Any]) -> builtins.list[Any]:
        """Expire the leases not renewed in time, then run the claim (`postgres_leases`)."""
        async with self._connection() as conn:
            await conn.execute(EXPIRE_SQL, params)
            cursor = await conn.execute(query, params)
            rows: builtins.list[Any] = await cursor.fetchall()
            return rows

    async def _all(self, query: str, *params: Any) -> builtins.list[Any]:
        async with self._connection() as conn:
            cursor = await conn.execute(query, params)
            rows: builtins.list[Any] = await cursor.fetchall()
            return rows


def migrate(url: str) -> None:
    """Apply the migrations this database lacks (blocking: run it on a thread).

    yoyo's lock makes replicas that start together wait for the first one's migration.
    """
    from yoyo import get_backend, read_migrations  # type: ignore[import-untyped]

    backend = get_backend("postgresql+psycopg://" + url.split("://", 1)[1])
    try:
        migrations = read_migrations(str(MIGRATIONS_DIR))
        with backend.lock():
            backend.apply_migrations(backend.to_apply(migrations))
    finally:
        backend.connection.close()


def _encode_slim(rollout: Rollout) -> tuple[str, str]:
    """The slim spec (redacted) and slim result, as `Rollout.slim` makes them."""
    slim = redacted(rollout).slim()
    return encode_model(slim.spec), encode_model(slim.result)


def _phase_changes(events: Sequence[RolloutEvent]) -> list[tuple[str, str, str]]:
    """(rollout_id, status, phase) of each PhaseChanged, in order."""
    return [
        (event.rollout_id, event.payload.status.value, event.payload.phase.value)
        for event in events
        if isinstance(event.payload, PhaseChanged)
    ]


def _placeholders(query: str) -> str:
    """`listing.page_query`'s SQLite placeholders (?) as psycopg's (%s)."""
    return query.replace("?", "%s")
