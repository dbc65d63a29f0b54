-- Ingested files. The checksum makes re-ingesting the same file a no-op.
CREATE TABLE datasets (
    dataset_id      TEXT PRIMARY KEY,
    source          TEXT NOT NULL,
    symbols         TEXT NOT NULL,
    row_count       BIGINT NOT NULL,
    first_date      TEXT NOT NULL,
    last_date       TEXT NOT NULL,
    checksum        TEXT NOT NULL UNIQUE,
    ingested_at_ms  BIGINT NOT NULL
);

-- Daily bars, shared reference data. Dates are YYYY-MM-DD, so text order is
-- date order.
CREATE TABLE bars (
    symbol      TEXT NOT NULL,
    date        TEXT NOT NULL,
    open        DOUBLE PRECISION NOT NULL,
    high        DOUBLE PRECISION NOT NULL,
    low         DOUBLE PRECISION NOT NULL,
    close       DOUBLE PRECISION NOT NULL,
    volume      BIGINT NOT NULL,
    adj_close   DOUBLE PRECISION NOT NULL,
    dataset_id  TEXT NOT NULL REFERENCES datasets (dataset_id),
    PRIMARY KEY (symbol, date)
);
