-- Ingested files. The checksum makes re-ingesting the same file a no-op.
CREATE TABLE datasets (
    dataset_id      TEXT PRIMARY KEY,
    source          TEXT NOT NULL,
    symbols         TEXT NOT NULL,
    row_count       INTEGER NOT NULL,
    first_date      TEXT NOT NULL,
    last_date       TEXT NOT NULL,
    checksum        TEXT NOT NULL UNIQUE,
    ingested_at_ms  INTEGER NOT NULL
);

-- Daily bars, shared reference data. Dates are YYYY-MM-DD, so text order is
-- date order.
CREATE TABLE bars (
    symbol      TEXT NOT NULL,
    date        TEXT NOT NULL,
    open        REAL NOT NULL,
    high        REAL NOT NULL,
    low         REAL NOT NULL,
    close       REAL NOT NULL,
    volume      INTEGER NOT NULL,
    adj_close   REAL NOT NULL,
    dataset_id  TEXT NOT NULL REFERENCES datasets (dataset_id),
    PRIMARY KEY (symbol, date)
);
