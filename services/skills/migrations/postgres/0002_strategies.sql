CREATE TABLE strategies (
    strategy_id    TEXT PRIMARY KEY,
    tenant_id      TEXT NOT NULL,
    session_id     TEXT NOT NULL,
    name           TEXT NOT NULL,
    -- The validated spec as JSON: universe, lookback, rebalance, risk, cost_bps.
    spec           TEXT NOT NULL,
    status         TEXT NOT NULL CHECK (status IN ('draft', 'paper', 'live')),
    created_at_ms  BIGINT NOT NULL
);

CREATE INDEX strategies_by_tenant ON strategies (tenant_id, created_at_ms);
