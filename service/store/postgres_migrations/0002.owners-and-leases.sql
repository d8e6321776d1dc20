-- Which server runs a rollout or a group (owner), and which servers are alive (a lease each,
-- renewed by heartbeats; times from the database's clock, so hosts' clocks never disagree).
-- Rows from before have no owner: the first server to start takes them over.
ALTER TABLE rollouts ADD COLUMN owner TEXT NOT NULL DEFAULT '';
ALTER TABLE groups ADD COLUMN owner TEXT NOT NULL DEFAULT '';
CREATE TABLE servers (
    owner TEXT PRIMARY KEY,
    heartbeat_at TIMESTAMPTZ NOT NULL
);
