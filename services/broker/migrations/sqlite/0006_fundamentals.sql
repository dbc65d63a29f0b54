-- SEC fundamentals (seed 002): companies, the tickers that map to them, the
-- filing index, reported facts with the filing each came from, Form 4
-- insider transactions, and the files ingested. Reference data shared by
-- every tenant. Dates are ISO `YYYY-MM-DD` text, so they compare as text.

-- One row per company (CIK, ten digits with leading zeros).
CREATE TABLE sec_companies (
    cik            TEXT PRIMARY KEY,
    name           TEXT NOT NULL,
    created_at_ms  INTEGER NOT NULL
);

-- Ticker to CIK, learned from the data (dei:TradingSymbol, a Data Set's
-- instance file name, a submissions file's `tickers`). `seen_on` is the date
-- of the evidence: newer evidence moves a ticker to another company.
CREATE TABLE sec_tickers (
    ticker         TEXT PRIMARY KEY,
    cik            TEXT NOT NULL REFERENCES sec_companies (cik),
    seen_on        TEXT NOT NULL,
    source_format  TEXT NOT NULL
);

-- The filing index (submissions JSON, or a Data Set's `sub.txt`, or a
-- companyfacts fact's accession): one row per accession number.
CREATE TABLE sec_filings (
    accession         TEXT PRIMARY KEY,
    cik               TEXT NOT NULL REFERENCES sec_companies (cik),
    form              TEXT NOT NULL,
    filing_date       TEXT NOT NULL,
    report_date       TEXT,
    primary_document  TEXT,
    source_format     TEXT NOT NULL
);

CREATE INDEX sec_filings_by_company ON sec_filings (cik, filing_date);
CREATE INDEX sec_filings_by_form ON sec_filings (cik, form, filing_date);

-- Numeric facts as reported, each with its provenance: the filing
-- (accession, form, filing date), the period (`period_start` for durations,
-- `period_end`, `quarters`: 0 an instant, 1..4 a duration of that many
-- quarters, -1 any other length), and the source format (`companyfacts`,
-- `xbrl`, `fsds`). `period_month` is the end rounded to the nearest month
-- end (`YYYY-MM`), which is how the Data Sets give it, so the same period
-- from every source has one key. `dims` is '' for an undimensioned total
-- and `Axis=Member;...` for a dimensional fact. `value_text` is the value
-- as written, `value` the same as a double. `fact_key` (SHA-256 of the
-- identifying columns) makes re-ingesting a no-op.
CREATE TABLE sec_facts (
    fact_key       TEXT PRIMARY KEY,
    cik            TEXT NOT NULL REFERENCES sec_companies (cik),
    concept        TEXT NOT NULL,
    unit           TEXT NOT NULL,
    period_start   TEXT,
    period_end     TEXT NOT NULL,
    period_month   TEXT NOT NULL,
    quarters       INTEGER NOT NULL,
    dims           TEXT NOT NULL,
    value          REAL NOT NULL,
    value_text     TEXT NOT NULL,
    accession      TEXT NOT NULL,
    form           TEXT NOT NULL,
    filed          TEXT NOT NULL,
    fiscal_year    INTEGER,
    fiscal_period  TEXT,
    source_format  TEXT NOT NULL
);

CREATE INDEX sec_facts_by_concept ON sec_facts (cik, concept, dims, filed);
CREATE INDEX sec_facts_by_filing ON sec_facts (accession);

-- Form 4 transactions, one row per line of the non-derivative or
-- derivative table. `txn_key` is the accession and the line's position.
CREATE TABLE sec_insider_transactions (
    txn_key            TEXT PRIMARY KEY,
    accession          TEXT NOT NULL,
    issuer_cik         TEXT NOT NULL REFERENCES sec_companies (cik),
    filed              TEXT NOT NULL,
    owner_cik          TEXT NOT NULL,
    owner_name         TEXT NOT NULL,
    relationship       TEXT NOT NULL,
    officer_title      TEXT,
    security           TEXT NOT NULL,
    derivative         INTEGER NOT NULL,
    transaction_date   TEXT NOT NULL,
    code               TEXT NOT NULL,
    shares             REAL NOT NULL,
    price              REAL,
    acquired_disposed  TEXT NOT NULL,
    shares_after       REAL NOT NULL,
    ownership          TEXT NOT NULL
);

CREATE INDEX sec_insider_by_issuer ON sec_insider_transactions (issuer_cik, transaction_date);

-- Ingested files; the checksum makes re-ingesting a file a no-op.
CREATE TABLE sec_files (
    checksum        TEXT PRIMARY KEY,
    source          TEXT NOT NULL,
    format          TEXT NOT NULL,
    items           INTEGER NOT NULL,
    ingested_at_ms  INTEGER NOT NULL
);
