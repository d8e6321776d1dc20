-- The PostgreSQL schema of SQLite's version 3 (service/store/schema.py), in one step.
-- Keys are compared byte by byte (COLLATE "C"), as in SQLite, whatever the database's locale.
-- Times are ISO text (exact round trip, offset kept); create_us orders and pages.
-- slim_spec and slim_result hold what `Rollout.slim` keeps, written beside the full documents,
-- so that a slim list never reads the bulk.
CREATE TABLE rollouts (
    id TEXT COLLATE "C" PRIMARY KEY,
    tenant TEXT NOT NULL,
    request_id TEXT,
    status TEXT NOT NULL,
    phase TEXT NOT NULL,
    create_us BIGINT NOT NULL,
    create_time TEXT NOT NULL,
    start_time TEXT,
    finish_time TEXT,
    spec TEXT NOT NULL,
    result TEXT NOT NULL,
    slim_spec TEXT NOT NULL,
    slim_result TEXT NOT NULL,
    group_id TEXT NOT NULL DEFAULT '',
    member_index INTEGER NOT NULL DEFAULT 0,
    UNIQUE (tenant, request_id)
);
CREATE INDEX rollouts_by_time ON rollouts (create_us DESC, id DESC);
CREATE INDEX rollouts_by_status ON rollouts (status, create_us DESC, id DESC);
CREATE INDEX rollouts_by_tenant ON rollouts (tenant, create_us DESC, id DESC);

-- One row per label, keyed in list order (create_us copied in).
CREATE TABLE rollout_labels (
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    create_us BIGINT NOT NULL,
    rollout_id TEXT COLLATE "C" NOT NULL REFERENCES rollouts (id) ON DELETE CASCADE,
    PRIMARY KEY (key, value, create_us, rollout_id)
);
CREATE INDEX rollout_labels_by_rollout ON rollout_labels (rollout_id);

-- kind is the payload's type name: JSON alone cannot tell the payload types apart.
CREATE TABLE events (
    rollout_id TEXT COLLATE "C" NOT NULL REFERENCES rollouts (id) ON DELETE CASCADE,
    seq BIGINT NOT NULL,
    time TEXT NOT NULL,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    PRIMARY KEY (rollout_id, seq)
);

CREATE TABLE groups (
    id TEXT COLLATE "C" PRIMARY KEY,
    tenant TEXT NOT NULL,
    request_id TEXT,
    status TEXT NOT NULL,
    create_us BIGINT NOT NULL,
    secret_free BOOLEAN NOT NULL,
    document TEXT NOT NULL,
    UNIQUE (tenant, request_id)
);
CREATE INDEX groups_by_status ON groups (status, create_us);
