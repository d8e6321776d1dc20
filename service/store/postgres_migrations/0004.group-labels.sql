-- ListGroups (SQLite's version 4): a group's labels (its spec's) as rollouts' are, in list
-- order, filled in for the groups already stored; and groups by time and by tenant, newest first.
CREATE TABLE group_labels (
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    create_us BIGINT NOT NULL,
    group_id TEXT COLLATE "C" NOT NULL REFERENCES groups (id) ON DELETE CASCADE,
    PRIMARY KEY (key, value, create_us, group_id)
);
INSERT INTO group_labels (key, value, create_us, group_id)
SELECT l.key, l.value, g.create_us, g.id
FROM groups AS g, jsonb_each_text(g.document::jsonb -> 'spec' -> 'spec' -> 'labels') AS l;
CREATE INDEX groups_by_time ON groups (create_us DESC, id DESC);
CREATE INDEX groups_by_tenant ON groups (tenant, create_us DESC, id DESC);
