-- A CancelRollout sent to a server that does not run the rollout: recorded here (the first
-- reason wins, as on the owner), and notified to the run that owns it (postgres_notify).
CREATE TABLE cancel_requests (
    rollout_id TEXT PRIMARY KEY REFERENCES rollouts (id),
    reason TEXT NOT NULL,
    requested_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
