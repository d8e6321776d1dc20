"""The SQL that picks one page of ListRollouts, newest first, without reading rollout bodies.

With labels, the scan walks the first label's index range (already in list order) and checks
the others by exact key lookups; without, it walks the rollouts' time or status index. Either
way it stops once the page is full, then the page's rows are read by id.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["page_query"]

_OTHER_LABEL = (
    "EXISTS (SELECT 1 FROM rollout_labels AS o WHERE o.key = ? AND o.value = ?"
    " AND o.create_us = k.create_us AND o.rollout_id = k.rollout_id)"
)


def page_query(
    labels: Mapping[str, str],
    statuses: Sequence[str],
    after: tuple[int, str] | None,
    limit: int,
    *,
    tenant: str | None = None,
) -> tuple[str, list[Any]]:
    """SQL and parameters selecting (create_us, id) of up to `limit` matching rollouts.

    `after` is the (create_us, id) of the previous page's last row, exclusive; `tenant`
    limits the page to that tenant's rollouts (None: every tenant's).
    """
    conditions: list[str] = []
    params: list[Any] = []
    if labels:
        source, key_id = "rollout_labels AS k", "k.rollout_id"
        (first_key, first_value), *others = labels.items()
        conditions.append("k.key = ? AND k.value = ?")
        params += (first_key, first_value)
        for key, value in others:
            conditions.append(_OTHER_LABEL)
            params += (key, value)
    else:
        source, key_id = "rollouts AS k", "k.id"
    if statuses:
        marks = ", ".join("?" * len(statuses))
        conditions.append(
            f"k.status IN ({marks})"
            if not labels
            else f"EXISTS (SELECT 1 FROM rollouts AS s WHERE s.id = k.rollout_id"
            f" AND s.status IN ({marks}))"
        )
        params += statuses
    if tenant is not None:
        conditions.append(
            "k.tenant = ?"
            if not labels
            else "EXISTS (SELECT 1 FROM rollouts AS t WHERE t.id = k.rollout_id AND t.tenant = ?)"
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
