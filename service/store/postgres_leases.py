"""Leases of servers sharing one PostgreSQL database: who runs what, and who is gone.

Every rollout and group row names its owner, the server that admitted it. Each open store
holds a lease (a `servers` row) and renews it every HEARTBEAT_S; a lease not renewed for
LEASE_S is expired. At start, a server takes over (`claim_*`) the unfinished rows whose owner
is itself (a previous run of it, same host and state folder) or has no live lease: a replica
that starts never touches what a live one runs, and what a dead one ran is taken over by
exactly one server (the UPDATE locks each row; a second claimant re-reads its new, live owner
and passes it by). The claimant then ends those rollouts as interrupted and resumes the groups,
as a restarted server always did.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

__all__ = [
    "HEARTBEAT_S",
    "LEASE_S",
    "claim_groups",
    "claim_params",
    "claim_rollouts",
    "keep_lease",
    "release",
    "renew",
]

log = logging.getLogger(__name__)

HEARTBEAT_S = 5.0
"""How often a server renews its lease."""
LEASE_S = 30.0
"""A server whose lease was not renewed for this long is taken as dead."""

_ORPHANED = (
    "owner = %(owner)s OR owner NOT IN (SELECT owner FROM servers"
    " WHERE heartbeat_at > now() - make_interval(secs => %(lease_s)s))"
)


def claim_rollouts(columns: str) -> str:
    """SQL taking over the unfinished, orphaned rollouts (params: owner, lease_s, live)."""
    return (
        f"UPDATE rollouts SET owner = %(owner)s WHERE status = ANY(%(live)s) AND ({_ORPHANED})"
        f" RETURNING create_us, {columns}"
    )


def claim_groups() -> str:
    """SQL taking over the running, orphaned groups (params: owner, lease_s, running)."""
    return (
        f"UPDATE groups SET owner = %(owner)s WHERE status = %(running)s AND ({_ORPHANED})"
        " RETURNING create_us, id, document, secret_free"
    )


async def renew(pool: AsyncConnectionPool, owner: str) -> None:
    """Take or renew `owner`'s lease."""
    async with pool.connection() as conn:
        await conn.execute(
            "INSERT INTO servers (owner, heartbeat_at) VALUES (%s, now())"
            " ON CONFLICT (owner) DO UPDATE SET heartbeat_at = now()",
            (owner,),
        )


async def keep_lease(pool: AsyncConnectionPool, owner: str) -> None:
    """Renew `owner`'s lease every HEARTBEAT_S until cancelled."""
    while True:
        await asyncio.sleep(HEARTBEAT_S)
        try:
            await renew(pool, owner)
        except psycopg.OperationalError as exc:
            # Missed beats only risk a takeover after LEASE_S; the next beat may well succeed.
            log.warning("could not renew this server's lease: %s", exc)


async def release(pool: AsyncConnectionPool, owner: str) -> None:
    """Give the lease up (a clean stop): what `owner` left unfinished is orphaned at once."""
    async with pool.connection() as conn:
        await conn.execute("DELETE FROM servers WHERE owner = %s", (owner,))


def claim_params(owner: str, **extra: Any) -> dict[str, Any]:
    """The parameters of `claim_rollouts` or `claim_groups` (with `extra` filled in)."""
    return {"owner": owner, "lease_s": LEASE_S, **extra}
