CREATE TABLE runs (
    run_id         TEXT PRIMARY KEY,
    tenant_id      TEXT NOT NULL,
    session_id     TEXT NOT NULL,
    skill_id       TEXT NOT NULL,
    version        TEXT NOT NULL,
    inputs         TEXT NOT NULL,
    status         TEXT NOT NULL CHECK (status IN ('draft', 'queued', 'running', 'succeeded', 'failed', 'cancelled')),
    outputs        TEXT,
    error          TEXT NOT NULL DEFAULT '',
    created_at_ms  BIGINT NOT NULL,
    updated_at_ms  BIGINT NOT NULL
);

CREATE INDEX runs_by_tenant ON runs (tenant_id, created_at_ms);

CREATE TABLE artifacts (
    artifact_id    TEXT PRIMARY KEY,
    run_id         TEXT NOT NULL REFERENCES runs (run_id),
    tenant_id      TEXT NOT NULL,
    name           TEXT NOT NULL,
    mime_type      TEXT NOT NULL,
    body           TEXT NOT NULL,
    created_at_ms  BIGINT NOT NULL
);

CREATE INDEX artifacts_by_run ON artifacts (run_id);
