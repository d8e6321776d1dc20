"""The SQL that picks one page of ListRollouts (or ListGroups), newest first, without reading
rollout (or group) bodies.

With labels, the scan walks the first label's index range (already in list order) and checks
the others by exact key lookups; without, it walks the rows' time, status or tenant index.
Either way it stops once the page is full, then the page's rows are read by id.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["GROUPS", "ROLLOUTS", "Listed", "page_query"]


@dataclass(frozen=True)
class Listed:
    """A listed table and its label table, one row per label keyed (key, value, create_us,
    `key`), `key` naming the listed row's id."""

    table: str
    labels: str
    key: str


ROLLOUTS = Listed("rollouts", "rollout_labels", "rollout_id")
GROUPS = Listed("groups", "group_labels", "group_id")


def page_query(
    labels: Mapping[str, str],
    statuses: Sequence[str],
    after: tuple[int, str] | None,
    limit: int,
    *,
    tenant: str | None = None,
    listed: Listed = ROLLOUTS,
) -> tuple[str, list[Any]]:
    """SQL and parameters selecting (create_us, id) of up to `limit` matching rows of
    `listed` (rollouts unless told).

    `after` is the (create_us, id) of the previous page's last row, exclusive; `tenant`
    limits the page to that tenant's rows (None: every tenant's).
    """
    table, key = listed.table, listed.key
    conditions: list[str] = []
    params: list[Any] = []
    if labels:
        source, key_id = f"{listed.labels} AS k", f"k.{key}"
        (first_key, first_value), *others = labels.items()
        conditions.append("k.key = ? AND k.value = ?")
        params += (first_key, first_value)
        for label_key, value in others:
            conditions.append(
                f"EXISTS (SELECT 1 FROM {listed.labels} AS o WHERE o.key = ? AND o.value = ?"
                f" AND o.create_us = k.create_us AND o.{key} = k.{key})"
            )
            params += (label_key, value)
    else:
        source, key_id = f"{table} AS k", "k.id"
    if statuses:
        marks = ", ".join("?" * len(statuses))
        conditions.append(
            f"k.status IN ({marks})"
            if not labels
            else f"EXISTS (SELECT 1 FROM {table} AS s WHERE s.id = k.{key}"
            f" AND s.status IN ({marks}))"
        )
        params += statuses
    if tenant is not None:
        conditions.append(
            "k.tenant = ?"
            if not labels
            else f"EXISTS (SELECT 1 FROM {table} AS t WHERE t.id = k.{key} AND t.tenant = ?)"
        )
        params.append(tenant)
    if after is not None:
        conditions.append(f"(k.create_us, {key_id}) < (?, ?)")
        params += after
    where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
    query = (
        f"SELECT k.create_us, {key_id} FROM {source} {where}"
        f" ORDER BY k.create_us DESC, {key_id} DESC LIMIT ?"
    )
    return query, [*params, limit]
