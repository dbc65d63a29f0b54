-- Archived sessions' traces leave the hot table (seed 002): the session row
-- stays (status `archived`) and its events move here, still readable.
CREATE TABLE trace_events_archive (
    session_id     TEXT NOT NULL REFERENCES sessions (session_id),
    seq            INTEGER NOT NULL,
    event_type     TEXT NOT NULL,
    payload        TEXT NOT NULL,
    created_at_ms  INTEGER NOT NULL,
    trace_id       TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);

-- The sweeper finds idle open sessions and old closed ones by these.
CREATE INDEX sessions_by_status_updated ON sessions (status, updated_at_ms);
