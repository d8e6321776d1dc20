"""Groups in SQLite: one row per group, the group itself as one JSON document.

A group's members are ordinary rollouts (their rows carry `group_id`); the document lists them
with what the group decided about each (counted, replaced). `secret_free` records whether the
members' spec needed no API key, so that a restarted server knows it may start new members.
The spec's labels are rows of group_labels too, for ListGroups (`group_listing`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from service.models import Group, GroupStatus
from service.store.codec import decode_model, encode_model
from service.store.group_listing import group_label_rows
from service.store.rows import epoch_us

__all__ = [
    "GroupStore",
    "find_group",
    "get_group",
    "insert_group",
    "save_group",
    "unfinished_groups",
]

StoredGroup = tuple[Group, bool]
"""A group and whether its members can be started without a secret the store never holds."""


class GroupStore(Protocol):
    """Persistence of groups (spec already redacted)."""

    async def insert_group(self, group: Group, *, secret_free: bool) -> Group:
        """Insert a new group; if its tenant already used its request_id, that group instead."""
        ...

    async def save_group(self, group: Group) -> None: ...

    async def get_group(self, group_id: str) -> Group | None: ...

    async def find_group(self, request_id: str, *, tenant: str) -> Group | None: ...

    async def unfinished_groups(self) -> list[StoredGroup]:
        """Groups not terminal (a previous server was running them), oldest first."""
        ...

    def follow_group(self, group_id: str) -> AsyncIterator[Group]:
        """The stored group, then again as other servers sharing the store save it, until it
        is terminal; a store no other server shares yields it once."""
        ...

    async def request_group_cancel(self, group_id: str, reason: str) -> bool:
        """Ask the live server that runs this group (another one sharing this store) to cancel
        it; False if none does."""
        ...

    def on_group_cancel_request(self, handler: Callable[[str, str], None]) -> None:
        """Have `handler(group_id, reason)` cancel the groups other servers ask this one to."""
        ...


def insert_group(conn: sqlite3.Connection, group: Group, secret_free: bool) -> Group:
    request_id = group.spec.spec.request_id or None
    cursor = conn.execute(
        "INSERT INTO groups (id, tenant, request_id, status, create_us, secret_free, document)"
        " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
        (
            group.id,
            group.tenant,
            request_id,
            group.status.value,
            epoch_us(group.create_time),
            int(secret_free),
            encode_model(group),
        ),
    )
    if cursor.rowcount:
        conn.executemany(
            "INSERT INTO group_labels (key, value, create_us, group_id) VALUES (?, ?, ?, ?)",
            group_label_rows(group),
        )
        return group
    existing = find_group(conn, request_id or "", group.tenant) or get_group(conn, group.id)
    assert existing is not None
    return existing


def save_group(conn: sqlite3.Connection, group: Group) -> None:
    conn.execute(
        "UPDATE groups SET status = ?, document = ? WHERE id = ?",
        (group.status.value, encode_model(group), group.id),
    )


def get_group(conn: sqlite3.Connection, group_id: str) -> Group | None:
    row = conn.execute("SELECT document FROM groups WHERE id = ?", (group_id,)).fetchone()
    return None if row is None else decode_model(Group, row[0])


def find_group(conn: sqlite3.Connection, request_id: str, tenant: str) -> Group | None:
    if not request_id:
        return None
    row = conn.execute(
        "SELECT document FROM groups WHERE tenant = ? AND request_id = ?", (tenant, request_id)
    ).fetchone()
    return None if row is None else decode_model(Group, row[0])


def unfinished_groups(conn: sqlite3.Connection) -> list[StoredGroup]:
    rows: list[Any] = conn.execute(
        "SELECT document, secret_free FROM groups WHERE status = ? ORDER BY create_us, id",
        (GroupStatus.RUNNING.value,),
    ).fetchall()
    return [(decode_model(Group, document), bool(free)) for document, free in rows]
