-- Provider accounts of a tenant. `config` holds connection details and
-- `credential` the encrypted credential (base64 of nonce ‖ ciphertext); neither
-- is ever returned.
CREATE TABLE accounts (
    account_id     TEXT PRIMARY KEY,
    tenant_id      TEXT NOT NULL,
    provider       TEXT NOT NULL,
    label          TEXT NOT NULL,
    config         TEXT NOT NULL,
    credential     TEXT,
    created_at_ms  INTEGER NOT NULL
);

CREATE INDEX accounts_by_tenant ON accounts (tenant_id, created_at_ms);
