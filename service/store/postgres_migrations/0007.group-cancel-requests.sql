-- A CancelGroup sent to a server that does not run the group: recorded here, as cancel_requests
-- records a CancelRollout, so that its owner takes it even if the notification is lost.
CREATE TABLE group_cancel_requests (
    group_id TEXT COLLATE "C" PRIMARY KEY REFERENCES groups (id),
    reason TEXT NOT NULL,
    requested_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
