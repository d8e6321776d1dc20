"""The SQL that picks one page of ListGroups, newest first, for both databases.

A group's labels are its spec's (`spec.spec.labels`), read out of its JSON document by the
database's own JSON functions (`label_match` differs by database): a label filter scans the
groups of the tenant and status asked for, which are few beside their members' rollouts, so
they have no label table of their own. The page is then read by id, as rollouts are
(`pages.read_page`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from service.models.group import Group, GroupStatus
from service.store.codec import decode_model

__all__ = [
    "POSTGRES_LABEL_MATCH",
    "SQLITE_LABEL_MATCH",
    "GroupLister",
    "GroupPage",
    "group_page_query",
    "sqlite_listed_group",
    "sqlite_page_keys",
]

GroupPage = tuple[list[Group], str]
"""A page of groups and the token of the next page ("" on the last)."""

SQLITE_LABEL_MATCH = (
    "EXISTS (SELECT 1 FROM json_each(document, '$.spec.spec.labels') AS l"
    " WHERE l.key = ? AND l.value = ?)"
)
"""Whether a group's document carries the label (key ?, value ?), in SQLite."""
POSTGRES_LABEL_MATCH = "(document::jsonb -> 'spec' -> 'spec' -> 'labels' ->> ?) = ?"
"""The same in PostgreSQL (its ? become %s with the rest of the query's)."""


class GroupLister(Protocol):
    """Pages of groups (ListGroups)."""

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
        """Up to `page_size` groups newest first whose spec carries every label, of `tenant`
        or (None) of every tenant, as many as `take` accepts (as `TakeRollout` does).

        Raises SpecError naming "page_size" or "page_token".
        """
        ...


def group_page_query(
    labels: Mapping[str, str],
    statuses: Sequence[GroupStatus],
    after: tuple[int, str] | None,
    limit: int,
    *,
    tenant: str | None,
    label_match: str,
) -> tuple[str, list[Any]]:
    """SQL (? placeholders) and parameters selecting (create_us, id) of up to `limit` matching
    groups after `after` (exclusive), newest first; `label_match` tests one label."""
    conditions: list[str] = []
    params: list[Any] = []
    for key, value in labels.items():
        conditions.append(label_match)
        params += (key, value)
    if statuses:
        conditions.append(f"status IN ({', '.join('?' * len(statuses))})")
        params += [GroupStatus(status).value for status in statuses]
    if tenant is not None:
        conditions.append("tenant = ?")
        params.append(tenant)
    if after is not None:
        conditions.append("(create_us, id) < (?, ?)")
        params += after
    where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
    query = f"SELECT create_us, id FROM groups {where} ORDER BY create_us DESC, id DESC LIMIT ?"
    return query, [*params, limit]


def sqlite_page_keys(
    conn: sqlite3.Connection,
    labels: Mapping[str, str],
    statuses: Sequence[GroupStatus],
    tenant: str | None,
    after: tuple[int, str] | None,
    limit: int,
) -> list[tuple[int, str]]:
    query, params = group_page_query(
        labels, statuses, after, limit, tenant=tenant, label_match=SQLITE_LABEL_MATCH
    )
    return conn.execute(query, params).fetchall()


def sqlite_listed_group(conn: sqlite3.Connection, group_id: str) -> Group:
    (document,) = conn.execute("SELECT document FROM groups WHERE id = ?", (group_id,)).fetchone()
    return decode_model(Group, document)
