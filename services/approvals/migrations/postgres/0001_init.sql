-- One row per tenant that changed its policy; absent means the defaults
-- (trading disabled).
CREATE TABLE policies (
    tenant_id         TEXT PRIMARY KEY,
    trading_enabled   BOOLEAN NOT NULL,
    live_enabled      BOOLEAN NOT NULL,
    max_notional_usd  DOUBLE PRECISION NOT NULL,
    max_quantity      DOUBLE PRECISION NOT NULL,
    updated_at_ms     BIGINT NOT NULL
);

CREATE TABLE approvals (
    approval_id    TEXT PRIMARY KEY,
    tenant_id      TEXT NOT NULL,
    tool           TEXT NOT NULL,
    arguments      TEXT NOT NULL,
    status         TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'denied', 'expired', 'executed', 'failed')),
    requested_by   TEXT NOT NULL,
    -- The requester's principal (JSON), so an approved call runs as them.
    requester      TEXT NOT NULL,
    session_id     TEXT NOT NULL,
    decided_by     TEXT NOT NULL DEFAULT '',
    note           TEXT NOT NULL DEFAULT '',
    result         TEXT,
    created_at_ms  BIGINT NOT NULL,
    decided_at_ms  BIGINT,
    expires_at_ms  BIGINT NOT NULL
);

CREATE INDEX approvals_by_tenant ON approvals (tenant_id, created_at_ms);
