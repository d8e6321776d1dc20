"""Durable rollouts, events and groups: SQLite embedded (the default) or PostgreSQL (shared).

`new_store` picks the backend from the settings' values; each backend's module is imported
only when chosen. What the engine and the sandboxes use besides is exported here, imported
when first asked for (`service.door`).
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import TYPE_CHECKING

from service.door import door

if TYPE_CHECKING:
    from service.store.base import (
        FencedError,
        Holder,
        Interrupted,
        RolloutPage,
        RolloutStore,
        TakeRollout,
    )
    from service.store.group_listing import GroupLister, GroupPage
    from service.store.groups import GroupStore
    from service.store.postgres import PostgresStore
    from service.store.postgres_lock import shared_lock
    from service.store.sqlite import SqliteStore

__all__ = [
    "FencedError",
    "GroupLister",
    "GroupPage",
    "GroupStore",
    "Holder",
    "Interrupted",
    "PostgresStore",
    "RolloutPage",
    "RolloutStore",
    "SqliteStore",
    "TakeRollout",
    "new_store",
    "shared_lock",
]

__getattr__ = door(__name__)


def new_store(
    database_url: str | None,
    database_path: Path,
    *,
    state_dir: Path,
    instance_id: str,
    lease_s: float,
) -> SqliteStore | PostgresStore:
    """The (unopened) store: PostgreSQL at `database_url` when set, else the SQLite file.

    On PostgreSQL the server is named by its host and state folder: the same server restarted
    takes its earlier run's unfinished rollouts back at once, without waiting out `lease_s`;
    what clients read names it by `instance_id` instead (no path).
    """
    if database_url:
        from service.store.postgres import PostgresStore

        server = f"{socket.gethostname()}:{state_dir.resolve()}"
        return PostgresStore(database_url, server=server, instance=instance_id, lease_s=lease_s)
    from service.store.sqlite import SqliteStore

    return SqliteStore(database_path)
