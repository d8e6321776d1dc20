"""The SQLite schema, versioned with `PRAGMA user_version` and migrated forward on open.

Each entry of MIGRATIONS takes the database from version i to i + 1; a database newer than
this code is refused rather than guessed at.
"""

from __future__ import annotations

import sqlite3

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "migrate"]

MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        # Times are ISO text (exact round trip, offset kept); create_us orders and pages.
        # request_id is NULL when unset: NULLs never collide in a UNIQUE index.
        """CREATE TABLE rollouts (
            id TEXT PRIMARY KEY,
            request_id TEXT UNIQUE,
            status TEXT NOT NULL,
            phase TEXT NOT NULL,
            create_us INTEGER NOT NULL,
            create_time TEXT NOT NULL,
            start_time TEXT,
            finish_time TEXT,
            spec TEXT NOT NULL,
            result TEXT NOT NULL
        )""",
        "CREATE INDEX rollouts_by_time ON rollouts (create_us DESC, id DESC)",
        "CREATE INDEX rollouts_by_status ON rollouts (status, create_us DESC, id DESC)",
        # One row per label, keyed in list order (create_us copied in): a label filter reads
        # one index range newest first and stops at the page's end.
        """CREATE TABLE rollout_labels (
            key TEXT NOT NULL,
            value TEXT NOT NULL,
            create_us INTEGER NOT NULL,
            rollout_id TEXT NOT NULL REFERENCES rollouts (id) ON DELETE CASCADE,
            PRIMARY KEY (key, value, create_us, rollout_id)
        ) WITHOUT ROWID""",
        "CREATE INDEX rollout_labels_by_rollout ON rollout_labels (rollout_id)",
        # kind is the payload's type name: JSON alone cannot tell the payload types apart.
        """CREATE TABLE events (
            rollout_id TEXT NOT NULL REFERENCES rollouts (id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            time TEXT NOT NULL,
            kind TEXT NOT NULL,
            payload TEXT NOT NULL,
            PRIMARY KEY (rollout_id, seq)
        )""",
    ),
    (
        # Tenants: request_id becomes unique per tenant, which SQLite can only express by
        # rebuilding the table (its documented procedure; `migrate` turns foreign keys off so
        # dropping the old table cascades to nothing). Existing rollouts belong to no tenant.
        """CREATE TABLE rollouts_v2 (
            id TEXT PRIMARY KEY,
            tenant TEXT NOT NULL,
            request_id TEXT,
            status TEXT NOT NULL,
            phase TEXT NOT NULL,
            create_us INTEGER NOT NULL,
            create_time TEXT NOT NULL,
            start_time TEXT,
            finish_time TEXT,
            spec TEXT NOT NULL,
            result TEXT NOT NULL,
            UNIQUE (tenant, request_id)
        )""",
        """INSERT INTO rollouts_v2 (id, tenant, request_id, status, phase, create_us,
            create_time, start_time, finish_time, spec, result)
        SELECT id, '', request_id, status, phase, create_us, create_time, start_time,
            finish_time, spec, result FROM rollouts""",
        "DROP TABLE rollouts",
        "ALTER TABLE rollouts_v2 RENAME TO rollouts",
        "CREATE INDEX rollouts_by_time ON rollouts (create_us DESC, id DESC)",
        "CREATE INDEX rollouts_by_status ON rollouts (status, create_us DESC, id DESC)",
        "CREATE INDEX rollouts_by_tenant ON rollouts (tenant, create_us DESC, id DESC)",
    ),
    (
        # Groups: a rollout may be a member of one; a group is one JSON document (its members
        # are few and always read together). secret_free says whether its members can be
        # started again after a restart (the API key is never stored).
        "ALTER TABLE rollouts ADD COLUMN group_id TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE rollouts ADD COLUMN member_index INTEGER NOT NULL DEFAULT 0",
        """CREATE TABLE groups (
            id TEXT PRIMARY KEY,
            tenant TEXT NOT NULL,
            request_id TEXT,
            status TEXT NOT NULL,
            create_us INTEGER NOT NULL,
            secret_free INTEGER NOT NULL,
            document TEXT NOT NULL,
            UNIQUE (tenant, request_id)
        )""",
        "CREATE INDEX groups_by_status ON groups (status, create_us)",
    ),
    (
        # ListGroups: a group's labels (its spec's) as rollouts' are, in list order, filled in
        # for the groups already stored; and groups by time and by tenant, newest first.
        """CREATE TABLE group_labels (
            key TEXT NOT NULL,
            value TEXT NOT NULL,
            create_us INTEGER NOT NULL,
            group_id TEXT NOT NULL REFERENCES groups (id) ON DELETE CASCADE,
            PRIMARY KEY (key, value, create_us, group_id)
        ) WITHOUT ROWID""",
        """INSERT INTO group_labels (key, value, create_us, group_id)
        SELECT l.key, l.value, g.create_us, g.id
        FROM groups AS g, json_each(g.document, '$.spec.spec.labels') AS l""",
        "CREATE INDEX groups_by_time ON groups (create_us DESC, id DESC)",
        "CREATE INDEX groups_by_tenant ON groups (tenant, create_us DESC, id DESC)",
    ),
)

SCHEMA_VERSION = len(MIGRATIONS)


def migrate(conn: sqlite3.Connection) -> None:
    """Bring the database at `conn` (in autocommit mode) to SCHEMA_VERSION, atomically.

    Foreign keys are off while it runs (a table rebuild must not cascade) and checked before
    the commit; the caller turns them on afterwards.
    """
    conn.execute("PRAGMA foreign_keys = OFF")
    conn.execute("BEGIN IMMEDIATE")
    try:
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        if version > SCHEMA_VERSION:
            raise RuntimeError(
                f"database schema version {version} is newer than this server's "
                f"({SCHEMA_VERSION}); upgrade the server or use another database file"
            )
        for statements in MIGRATIONS[version:]:
            for statement in statements:
                conn.execute(statement)
        if conn.execute("PRAGMA foreign_key_check").fetchone() is not None:
            raise RuntimeError("schema migration broke a foreign key; the database is unchanged")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
