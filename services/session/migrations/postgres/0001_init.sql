CREATE TABLE sessions (
    session_id     TEXT PRIMARY KEY,
    tenant_id      TEXT NOT NULL,
    agent_id       TEXT NOT NULL,
    title          TEXT NOT NULL,
    status         TEXT NOT NULL CHECK (status IN ('open', 'closed', 'archived')),
    created_at_ms  BIGINT NOT NULL,
    updated_at_ms  BIGINT NOT NULL,
    closed_at_ms   BIGINT,
    -- The last allocated trace seq. Incremented in the same transaction as
    -- each event insert, which makes the sequence gap-free.
    last_seq       BIGINT NOT NULL DEFAULT 0,
    prompt_count   BIGINT NOT NULL DEFAULT 0
);

CREATE INDEX sessions_by_tenant ON sessions (tenant_id, created_at_ms);

CREATE TABLE prompts (
    session_id     TEXT NOT NULL REFERENCES sessions (session_id),
    position       BIGINT NOT NULL,
    text           TEXT NOT NULL,
    created_at_ms  BIGINT NOT NULL,
    PRIMARY KEY (session_id, position)
);

-- The session each (tenant, agent) is working in, so any edge replica finds it.
CREATE TABLE current_sessions (
    tenant_id      TEXT NOT NULL,
    agent_id       TEXT NOT NULL,
    session_id     TEXT NOT NULL REFERENCES sessions (session_id),
    updated_at_ms  BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, agent_id)
);

CREATE TABLE trace_events (
    session_id     TEXT NOT NULL REFERENCES sessions (session_id),
    seq            BIGINT NOT NULL,
    event_type     TEXT NOT NULL,
    payload        TEXT NOT NULL,
    created_at_ms  BIGINT NOT NULL,
    trace_id       TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);
