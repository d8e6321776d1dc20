"""Leases of servers sharing one PostgreSQL database: who runs what, and who is gone.

Each open store is one run of a server: a fresh `owner` id, the `server` name it keeps
across restarts (host and state folder), and its `instance` id (ROLLOUT_INSTANCE_ID, which
names it to clients: the server name shows a path). Every rollout and group row names the run
that admitted it (a rollout row its server and instance too). A run holds a lease (a `servers`
row) and renews it every lease_s / 6 on a connection of its own, never the store's pool: a pool
busy with writes (a loaded replica) would delay the heartbeats past lease_s and lose the lease.
A run that takes over first deletes the leases not renewed for lease_s (`EXPIRE_SQL`); a run of
the same server that opens deletes its earlier runs' leases. A run without a lease row is gone
for certain, and `claim_*` takes over its unfinished rows: never what a live replica runs, never
this run's own, and each row for exactly one claimant (the UPDATE locks the row; a second
claimant re-reads its new owner and passes it by). The claimant ends those rollouts as
interrupted (saying whether its own server restarted or which other one stopped: the claim
returns the run, server and instance it took each row from) and resumes the groups, as a
restarted server always did.

Fencing: a run writes its rows only `WHERE owner = <its owner>` (`PostgresStore`), so once a
claimant has set its own owner on a row, the run that lost it can no longer write it. A run
whose heartbeat finds its lease row deleted (it stalled past lease_s and a replica expired it)
has lost everything it ran: it takes a new lease under a new owner id for new work and tells
the store (`on_lost`, with the old owner), whose handlers stop the runs of the old one.

A run cut off from the database cannot learn that: once its heartbeats have failed for lease_s
by its own monotonic clock since the last one that succeeded (measured from when that one was
sent, so never later than the database's expiry), a replica may be taking its work over, so it
fences itself at once (`on_expired`: stop the runs, sandboxes torn down, nothing written). When
it reaches the database again it gives that lease up and takes a new one, as above: what the
old one ran is taken over (ended as interrupted) by whichever replica claims it first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

__all__ = ["APPLICATION_NAME", "EXPIRE_SQL", "Lease", "claim_groups", "claim_rollouts"]

log = logging.getLogger(__name__)

APPLICATION_NAME = "rollout-lease"
"""The heartbeat connection's name in pg_stat_activity."""

EXPIRE_SQL = "DELETE FROM servers WHERE heartbeat_at <= now() - make_interval(secs => %(lease_s)s)"
"""Delete the leases not renewed for lease_s (`Lease.params`): their runs are gone, and a run
that stalled past its lease finds its lease taken at its next heartbeat. The DELETE re-checks
a row a heartbeat renews meanwhile, so a run is either renewed or gone, never both."""

_GONE = (
    "owner NOT IN (SELECT owner FROM servers)"
    " AND EXISTS (SELECT 1 FROM servers WHERE owner = %(owner)s)"
)
"""The row's owner holds no lease, and the claimant still holds its own."""


def claim_rollouts(columns: str) -> str:
    """SQL taking over the unfinished rollouts of gone runs (`Lease.params`, live), returning
    the owner, server and instance each was taken from, create_us, then `columns`. A row whose owner
    changed while the claim waited for its lock (another claimant's) is passed by."""
    return (
        "UPDATE rollouts SET owner = %(owner)s, server = %(server)s, instance = %(instance)s"
        " FROM (SELECT id AS was_id, owner AS was_owner, server AS was_server,"
        " instance AS was_instance FROM rollouts"
        f" WHERE status = ANY(%(live)s) AND {_GONE}) AS was"
        " WHERE rollouts.id = was_id AND rollouts.owner = was_owner"
        " AND rollouts.status = ANY(%(live)s)"
        f" RETURNING was_owner, was_server, was_instance, create_us, {columns}"
    )


def claim_groups() -> str:
    """SQL taking over the running groups of gone runs (`Lease.params`, running, live): only
    once no unfinished member is another run's (a replica taking over the members ends them
    before it resumes their group; one that has claimed them but not yet ended them keeps
    the group for itself), so that the group resumes with its members' ends known."""
    return (
        f"UPDATE groups SET owner = %(owner)s WHERE status = %(running)s AND {_GONE}"
        " AND NOT EXISTS (SELECT 1 FROM rollouts WHERE rollouts.status = ANY(%(live)s)"
        " AND rollouts.group_id = groups.id AND rollouts.owner <> %(owner)s)"
        " RETURNING create_us, id, document, secret_free"
    )


LostHandler = Callable[[str], Awaitable[None]]
"""Called with the owner id of a lease this run lost, once it holds a new one."""
ExpiredHandler = Callable[[], None]
"""Called, without the database, when this run's lease expired by its own clock."""


class Lease:
    """One run's lease: taken by `take`, renewed (or replaced once lost) until `release`, on a
    connection of its own (reconnected after a failed beat)."""

    def __init__(
        self,
        owner: str,
        server: str,
        instance: str,
        lease_s: float,
        on_lost: LostHandler,
        on_expired: ExpiredHandler,
    ) -> None:
        self.owner = owner
        self.server = server
        self.instance = instance
        self.lease_s = lease_s
        self.lost: set[str] = set()
        """The owner ids of the leases this run lost."""
        self.address = ""
        """Where this run's API is reached (`advertise`), kept by every lease it takes."""
        self._on_lost = on_lost
        self._on_expired = on_expired
        self._renewed_at = 0.0
        """When the last heartbeat that succeeded was sent (time.monotonic)."""
        self._expired = False
        """This run fenced itself (its lease expired by its clock): give the lease up."""
        self._renewing: asyncio.Task[None] | None = None
        self._check = asyncio.Event()
        self._conn: psycopg.AsyncConnection[Any] | None = None

    def params(self, **extra: Any) -> dict[str, Any]:
        """The parameters of `claim_rollouts` or `claim_groups` (with `extra` filled in)."""
        return {
            "owner": self.owner,
            "server": self.server,
            "instance": self.instance,
            "lease_s": self.lease_s,
            **extra,
        }

    def check(self) -> None:
        """Renew now rather than at the next beat (a write found itself fenced)."""
        self._check.set()

    async def take(self, url: str) -> None:
        """Forget this server's earlier runs' leases, take this run's, and keep renewing it."""
        self._renewed_at = time.monotonic()
        conn = await self._connection(url)
        try:
            async with conn.transaction():
                await conn.execute("DELETE FROM servers WHERE server = %s", (self.server,))
                await self._insert(conn, self.owner)
        except BaseException:
            await self._disconnect()
            raise
        self._renewing = asyncio.create_task(self._keep(url), name="postgres-lease")

    async def advertise(self, pool: AsyncConnectionPool, address: str) -> None:
        """Name where this run's API is reached, in its lease row (and every later one)."""
        self.address = address
        async with pool.connection() as conn:
            await conn.execute(
                "UPDATE servers SET address = %s WHERE owner = %s", (address, self.owner)
            )

    async def release(self, pool: AsyncConnectionPool) -> None:
        """Stop renewing and give the lease up: what this run left is orphaned at once."""
        renewing, self._renewing = self._renewing, None
        if renewing is not None:
            renewing.cancel()
            await asyncio.gather(renewing, return_exceptions=True)
        try:
            async with pool.connection() as conn:
                await conn.execute("DELETE FROM servers WHERE owner = %s", (self.owner,))
        finally:
            await self._disconnect()

    def _left_s(self) -> float:
        """How long the lease still holds by this run's clock (infinite once fenced)."""
        if self._expired:
            return float("inf")
        return self._renewed_at + self.lease_s - time.monotonic()

    async def _keep(self, url: str) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._check.wait(), max(min(self.lease_s / 6, self._left_s()), 0)
                )
            self._check.clear()
            sent = time.monotonic()
            try:
                # A beat with no answer (a half-open connection) gives up in time to reconnect,
                # or when the lease expires; wait_for, not timeout: a late cancel must never
                # reach this task.
                timeout_s = max(min(self.lease_s / 3, self._left_s()), 0)
                lost = await asyncio.wait_for(self._renew(url), timeout_s)
            except (psycopg.Error, TimeoutError) as exc:
                # A missed beat only risks a takeover after lease_s; the next may succeed.
                log.warning("could not renew this server's lease: %s", str(exc) or "no answer")
                await self._disconnect()
                if self._left_s() <= 0:
                    self._expired = True
                    self._on_expired()
                continue
            self._renewed_at = sent
            if lost is not None:
                await self._on_lost(lost)

    async def _renew(self, url: str) -> str | None:
        """Renew the lease; if it was taken (or this run fenced itself), take a new one and
        return the lost owner id."""
        conn = await self._connection(url)
        lost, owner = self.owner, uuid.uuid4().hex
        if self._expired:
            async with conn.transaction():
                await conn.execute("DELETE FROM servers WHERE owner = %s", (lost,))
                await self._insert(conn, owner)
            self._expired = False
        else:
            cursor = await conn.execute(
                "UPDATE servers SET heartbeat_at = now() WHERE owner = %s", (lost,)
            )
            if cursor.rowcount:
                return None
            await self._insert(conn, owner)
        self.owner = owner
        self.lost.add(lost)
        return lost

    async def _connection(self, url: str) -> psycopg.AsyncConnection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = await psycopg.AsyncConnection.connect(
                url, autocommit=True, application_name=APPLICATION_NAME
            )
        return self._conn

    async def _disconnect(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()

    async def _insert(self, conn: psycopg.AsyncConnection[Any], owner: str) -> None:
        await conn.execute(
            "INSERT INTO servers (owner, server, address, heartbeat_at) VALUES (%s, %s, %s, now())",
            (owner, self.server, self.address),
        )
