-- The instance id (ROLLOUT_INSTANCE_ID) of the server whose run owns each rollout, set with its
-- owner and server, so that a takeover's message names the server that stopped by an id that
-- shows no host name or path. Rows from before have none ('').
ALTER TABLE rollouts ADD COLUMN instance TEXT NOT NULL DEFAULT '';
