CREATE TABLE tenants (
    tenant_id     TEXT PRIMARY KEY,
    name          TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL
);

CREATE TABLE api_keys (
    key_id           TEXT PRIMARY KEY,
    tenant_id        TEXT NOT NULL REFERENCES tenants (tenant_id),
    env              TEXT NOT NULL,
    salt             TEXT NOT NULL,
    secret_hash      TEXT NOT NULL,
    scopes           TEXT NOT NULL,
    actor            TEXT NOT NULL CHECK (actor IN ('human', 'agent')),
    label            TEXT NOT NULL,
    created_at_ms    BIGINT NOT NULL,
    revoked_at_ms    BIGINT,
    last_used_at_ms  BIGINT
);

CREATE INDEX api_keys_by_tenant ON api_keys (tenant_id, created_at_ms);
