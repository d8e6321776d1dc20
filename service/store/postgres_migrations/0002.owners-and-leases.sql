-- Which server run admitted a rollout or a group (owner), and which runs are alive (a lease
-- each, renewed by heartbeats; times from the database's clock, so hosts' clocks never
-- disagree). server names the server across its runs (host and state folder).
-- Rows from before have no owner: the first server to look takes them over.
ALTER TABLE rollouts ADD COLUMN owner TEXT NOT NULL DEFAULT '';
ALTER TABLE groups ADD COLUMN owner TEXT NOT NULL DEFAULT '';
CREATE TABLE servers (
    owner TEXT PRIMARY KEY,
    server TEXT NOT NULL,
    heartbeat_at TIMESTAMPTZ NOT NULL
);
