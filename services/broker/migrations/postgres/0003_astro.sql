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
    created_at_ms  BIGINT NOT NULL
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
    first_seen_ms  BIGINT NOT NULL
);

-- Ingested files; the checksum makes re-ingesting a file a no-op.
CREATE TABLE alert_files (
    broker_id       TEXT NOT NULL,
    checksum        TEXT NOT NULL,
    source          TEXT NOT NULL,
    alerts          BIGINT NOT NULL,
    ingested_at_ms  BIGINT NOT NULL,
    PRIMARY KEY (broker_id, checksum)
);

-- One row per alert. `hpx` is the HEALPix NESTED index at depth 29 of
-- (ra, dec), so a cone search reads index ranges. `candidate` is the
-- candidate record as JSON; `packet` the whole alert (history, forced
-- photometry, cutouts) as an Avro datum of schema `schema_id`.
CREATE TABLE alerts (
    broker_id         TEXT NOT NULL,
    candid            BIGINT NOT NULL,
    object_id         TEXT NOT NULL,
    jd                DOUBLE PRECISION NOT NULL,
    fid               BIGINT NOT NULL,
    ra                DOUBLE PRECISION NOT NULL,
    dec               DOUBLE PRECISION NOT NULL,
    hpx               BIGINT NOT NULL,
    magpsf            DOUBLE PRECISION,
    schemavsn         TEXT NOT NULL,
    schema_id         TEXT NOT NULL REFERENCES alert_schemas (schema_id),
    prv_detections    BIGINT NOT NULL,
    prv_upper_limits  BIGINT NOT NULL,
    fp_hists          BIGINT,
    candidate         TEXT NOT NULL,
    packet            BYTEA NOT NULL,
    ingested_at_ms    BIGINT NOT NULL,
    PRIMARY KEY (broker_id, candid)
);

CREATE INDEX alerts_by_hpx ON alerts (broker_id, hpx, jd);
CREATE INDEX alerts_by_object ON alerts (broker_id, object_id, jd);

-- Reference catalog sources. `hpx` as for alerts, of the catalog position.
CREATE TABLE catalog_sources (
    catalog        TEXT NOT NULL,
    source_id      TEXT NOT NULL,
    ra             DOUBLE PRECISION NOT NULL,
    dec            DOUBLE PRECISION NOT NULL,
    hpx            BIGINT NOT NULL,
    epoch          DOUBLE PRECISION NOT NULL,
    pm_ra          DOUBLE PRECISION,
    pm_dec         DOUBLE PRECISION,
    parallax       DOUBLE PRECISION,
    mag            DOUBLE PRECISION,
    mag_band       TEXT,
    kind           TEXT,
    morphology     TEXT,
    major_axis     DOUBLE PRECISION,
    minor_axis     DOUBLE PRECISION,
    redshift       DOUBLE PRECISION,
    radial_velocity DOUBLE PRECISION,
    names          TEXT,
    b_v            DOUBLE PRECISION,
    PRIMARY KEY (catalog, source_id)
);

CREATE INDEX catalog_sources_by_hpx ON catalog_sources (hpx);

CREATE TABLE catalog_files (
    checksum        TEXT PRIMARY KEY,
    catalog         TEXT NOT NULL,
    source          TEXT NOT NULL,
    rows            BIGINT NOT NULL,
    ingested_at_ms  BIGINT NOT NULL
);
