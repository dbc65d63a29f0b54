-- Execution attempts of runs.
CREATE TABLE jobs (
    job_id          TEXT PRIMARY KEY,
    run_id          TEXT NOT NULL REFERENCES runs (run_id),
    tenant_id       TEXT NOT NULL,
    attempt         BIGINT NOT NULL,
    status          TEXT NOT NULL CHECK (status IN ('running', 'succeeded', 'failed', 'cancelled')),
    started_at_ms   BIGINT NOT NULL,
    finished_at_ms  BIGINT,
    error           TEXT NOT NULL DEFAULT ''
);

CREATE INDEX jobs_by_run ON jobs (run_id, attempt);
