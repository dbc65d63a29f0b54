-- Alert brokers configured for this deployment. `altdata` (connection
-- details) and `credential` are sealed with the vault and never returned.
-- `operations` is a space-separated list.
CREATE TABLE brokers (
    broker_id      TEXT PRIMARY KEY,
    name           TEXT NOT NULL,
    survey         TEXT NOT NULL,
    operations     TEXT NOT NULL,
    altdata        TEXT,
    credential     TEXT,
    created_at_ms  INTEGER NOT NULL
);

-- Every deployment has its own archive, which answers every operation.
INSERT INTO brokers (broker_id, name, survey, operations, altdata, credential, created_at_ms)
VALUES ('ztf-archive', 'ZTF alert archive of this deployment', 'ZTF', 'alerts photometry crossmatch', NULL, NULL, 0);

-- Writer schemas of ingested containers, by the SHA-256 of their canonical
-- form, with the version label of their alerts (`4.02`, `4.02/Fink`). Packets are stored as Avro datums of their writer schema.
CREATE TABLE alert_schemas (
    schema_id      TEXT PRIMARY KEY,
    version        TEXT NOT NULL,
    schema_json    TEXT NOT NULL,
    -- The schema flattened to dotted paths (JSON), docs included.
    paths          TEXT NOT NULL,
    first_seen_ms  INTEGER NOT NULL
);

-- Ingested files; the checksum makes re-ingesting a file a no-op.
CREATE TABLE alert_files (
    broker_id       TEXT NOT NULL,
    checksum        TEXT NOT NULL,
    source          TEXT NOT NULL,
    alerts          INTEGER NOT NULL,
    ingested_at_ms  INTEGER NOT NULL,
    PRIMARY KEY (broker_id, checksum)
);

-- One row per alert. `hpx` is the HEALPix NESTED index at depth 29 of
-- (ra, dec), so a cone search reads index ranges. `candidate` is the
-- candidate record as JSON; `packet` the whole alert (history, forced
-- photometry, cutouts) as an Avro datum of schema `schema_id`.
CREATE TABLE alerts (
    broker_id         TEXT NOT NULL,
    candid            INTEGER NOT NULL,
    object_id         TEXT NOT NULL,
    jd                REAL NOT NULL,
    fid               INTEGER NOT NULL,
    ra                REAL NOT NULL,
    dec               REAL NOT NULL,
    hpx               INTEGER NOT NULL,
    magpsf            REAL,
    schemavsn         TEXT NOT NULL,
    schema_id         TEXT NOT NULL REFERENCES alert_schemas (schema_id),
    prv_detections    INTEGER NOT NULL,
    prv_upper_limits  INTEGER NOT NULL,
    fp_hists          INTEGER,
    candidate         TEXT NOT NULL,
    packet            BLOB NOT NULL,
    ingested_at_ms    INTEGER NOT NULL,
    PRIMARY KEY (broker_id, candid)
);

CREATE INDEX alerts_by_hpx ON alerts (broker_id, hpx, jd);
CREATE INDEX alerts_by_object ON alerts (broker_id, object_id, jd);

-- Reference catalog sources. `hpx` as for alerts, of the catalog position.
CREATE TABLE catalog_sources (
    catalog        TEXT NOT NULL,
    source_id      TEXT NOT NULL,
    ra             REAL NOT NULL,
    dec            REAL NOT NULL,
    hpx            INTEGER NOT NULL,
    epoch          REAL NOT NULL,
    pm_ra          REAL,
    pm_dec         REAL,
    parallax       REAL,
    mag            REAL,
    mag_band       TEXT,
    kind           TEXT,
    morphology     TEXT,
    major_axis     REAL,
    minor_axis     REAL,
    redshift       REAL,
    radial_velocity REAL,
    names          TEXT,
    b_v            REAL,
    PRIMARY KEY (catalog, source_id)
);

CREATE INDEX catalog_sources_by_hpx ON catalog_sources (hpx);

CREATE TABLE catalog_files (
    checksum        TEXT PRIMARY KEY,
    catalog         TEXT NOT NULL,
    source          TEXT NOT NULL,
    rows            INTEGER NOT NULL,
    ingested_at_ms  INTEGER NOT NULL
);
