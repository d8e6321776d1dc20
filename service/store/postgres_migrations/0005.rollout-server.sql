-- The server (host and state folder) whose run owns each rollout, set with its owner, so that
-- a run taking a rollout over can tell a restart of the same server from a takeover of another
-- one's (the gone run's lease row is deleted by then). Unfinished rows from before name the
-- server of an owner that still holds a lease, else none (''); a finished row is never claimed.
ALTER TABLE rollouts ADD COLUMN server TEXT NOT NULL DEFAULT '';
UPDATE rollouts SET server = servers.server FROM servers
WHERE servers.owner = rollouts.owner AND rollouts.status IN ('queued', 'running');
