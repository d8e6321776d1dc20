"""ListGroups in both databases: a group's labels (its spec's, `spec.spec.labels`) are rows of
group_labels as a rollout's are of rollout_labels, so a page is picked by `listing.page_query`
as a page of rollouts is, then read by id (`pages.read_page`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from service.models import Group, GroupStatus
from service.store.codec import decode_model
from service.store.listing import GROUPS, page_query
from service.store.rows import epoch_us

__all__ = [
    "GroupLister",
    "GroupPage",
    "group_label_rows",
    "group_page_query",
    "sqlite_listed_group",
    "sqlite_page_keys",
]

GroupPage = tuple[list[Group], str]
"""A page of groups and the token of the next page ("" on the last)."""


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
) -> tuple[str, list[Any]]:
    """SQL (? placeholders) and parameters selecting (create_us, id) of up to `limit` matching
    groups after `after` (exclusive), newest first."""
    values = [GroupStatus(status).value for status in statuses]
    return page_query(labels, values, after, limit, tenant=tenant, listed=GROUPS)


def group_label_rows(group: Group) -> list[tuple[str, str, int, str]]:
    """The group_labels rows of a new group: (key, value, create_us, group_id)."""
    create_us = epoch_us(group.create_time)
    return [(key, value, create_us, group.id) for key, value in group.spec.spec.labels.items()]


def sqlite_page_keys(
    conn: sqlite3.Connection,
    labels: Mapping[str, str],
    statuses: Sequence[GroupStatus],
    tenant: str | None,
    after: tuple[int, str] | None,
    limit: int,
) -> list[tuple[int, str]]:
    query, params = group_page_query(labels, statuses, after, limit, tenant=tenant)
    return conn.execute(query, params).fetchall()


def sqlite_listed_group(conn: sqlite3.Connection, group_id: str) -> Group:
    (document,) = conn.execute("SELECT document FROM groups WHERE id = ?", (group_id,)).fetchone()
    return decode_model(Group, document)
