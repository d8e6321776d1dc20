"""Leases of servers sharing one PostgreSQL database: who runs what, and who is gone.

Each open store is one run of a server: a fresh `owner` id, and the `server` name it keeps
across restarts (host and state folder). Every rollout and group row names the run that
admitted it. A run holds a lease (a `servers` row) and renews it every lease_s / 6; one not
renewed for lease_s is expired, and a run of the same server that opened since is gone for
certain. `claim_*` takes over the unfinished rows of gone runs: never what a live replica
runs, never this run's own, and each row for exactly one claimant (the UPDATE locks the row;
a second claimant re-reads its new, live owner and passes it by). The claimant ends those
rollouts as interrupted and resumes the groups, as a restarted server always did.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

__all__ = ["Lease", "claim_groups", "claim_rollouts"]

log = logging.getLogger(__name__)

_GONE = (
    "owner NOT IN (SELECT owner FROM servers WHERE owner = %(owner)s OR (server <> %(server)s"
    " AND heartbeat_at > now() - make_interval(secs => %(lease_s)s)))"
)


def claim_rollouts(columns: str) -> str:
    """SQL taking over the unfinished rollouts of gone runs (`Lease.params`, live)."""
    return (
        f"UPDATE rollouts SET owner = %(owner)s WHERE status = ANY(%(live)s) AND {_GONE}"
        f" RETURNING create_us, {columns}"
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


class Lease:
    """One run's lease: taken by `take`, renewed until `release`."""

    def __init__(self, owner: str, server: str, lease_s: float) -> None:
        self.owner = owner
        self.server = server
        self.lease_s = lease_s
        self._renewing: asyncio.Task[None] | None = None

    def params(self, **extra: Any) -> dict[str, Any]:
        """The parameters of `claim_rollouts` or `claim_groups` (with `extra` filled in)."""
        return {"owner": self.owner, "server": self.server, "lease_s": self.lease_s, **extra}

    async def take(self, pool: AsyncConnectionPool) -> None:
        """Forget this server's earlier runs' leases, take this run's, and keep renewing it."""
        async with pool.connection() as conn, conn.transaction():
            await conn.execute("DELETE FROM servers WHERE server = %s", (self.server,))
            await self._renew(conn)
        self._renewing = asyncio.create_task(self._keep(pool), name="postgres-lease")

    async def release(self, pool: AsyncConnectionPool) -> None:
        """Stop renewing and give the lease up: what this run left is orphaned at once."""
        renewing, self._renewing = self._renewing, None
        if renewing is not None:
            renewing.cancel()
            await asyncio.gather(renewing, return_exceptions=True)
        async with pool.connection() as conn:
            await conn.execute("DELETE FROM servers WHERE owner = %s", (self.owner,))

    async def _keep(self, pool: AsyncConnectionPool) -> None:
        while True:
            await asyncio.sleep(self.lease_s / 6)
            try:
                async with pool.connection() as conn:
                    await self._renew(conn)
            except psycopg.OperationalError as exc:
                # A missed beat only risks a takeover after lease_s; the next may succeed.
                log.warning("could not renew this server's lease: %s", exc)

    async def _renew(self, conn: psycopg.AsyncConnection[Any]) -> None:
        await conn.execute(
            "INSERT INTO servers (owner, server, heartbeat_at) VALUES (%s, %s, now())"
            " ON CONFLICT (owner) DO UPDATE SET heartbeat_at = now()",
            (self.owner, self.server),
        )
