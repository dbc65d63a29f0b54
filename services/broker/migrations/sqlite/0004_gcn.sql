-- GCN events (seed 003): triggers grouped by their time, with the names
-- they go by, the circulars and notices about them, the localisations those
-- carry, extractions parsed out of the circulars, and each tenant's
-- discussion. Everything but extractions added by a tenant's producer and
-- the comments is reference data shared by every tenant.

-- One row per event. `dateobs` is the canonical trigger time
-- (`2026-04-21T04:13:21.170Z`, milliseconds only when not zero), the key
-- every other table and every tool uses; it never changes once created.
-- `dateobs_from` says where that time came from; `time_exact` is 1 when it
-- is known to the second (a notice, a mission elapsed time, a stated trigger
-- time), 0 for a date or a submission time. Only exact times group triggers.
CREATE TABLE gcn_events (
    dateobs        TEXT PRIMARY KEY,
    dateobs_ms     INTEGER NOT NULL,
    kind           TEXT NOT NULL,
    dateobs_from   TEXT NOT NULL,
    time_exact     INTEGER NOT NULL,
    created_at_ms  INTEGER NOT NULL
);

CREATE INDEX gcn_events_by_time ON gcn_events (dateobs_ms);

-- The names an event goes by (`GRB 230812B`, `S230814r`, `Fermi 713559497`),
-- each owned by one event. `alias_key` is the lowercase form lookups use.
CREATE TABLE gcn_aliases (
    alias_key      TEXT PRIMARY KEY,
    alias          TEXT NOT NULL,
    dateobs        TEXT NOT NULL REFERENCES gcn_events (dateobs),
    added_from     TEXT NOT NULL,
    created_at_ms  INTEGER NOT NULL
);

CREATE INDEX gcn_aliases_by_event ON gcn_aliases (dateobs);

-- GCN Circulars by their number. `dateobs` is the event the circular is
-- about, NULL while it names nothing known. `checksum` is the SHA-256 of the
-- record as ingested, so the same circular twice changes nothing.
CREATE TABLE gcn_circulars (
    circular_id     INTEGER PRIMARY KEY,
    dateobs         TEXT REFERENCES gcn_events (dateobs),
    subject         TEXT NOT NULL,
    submitter       TEXT NOT NULL,
    created_on_ms   INTEGER NOT NULL,
    body            TEXT NOT NULL,
    event_id        TEXT,
    bibcode         TEXT,
    checksum        TEXT NOT NULL,
    ingested_at_ms  INTEGER NOT NULL
);

CREATE INDEX gcn_circulars_by_event ON gcn_circulars (dateobs, circular_id);

-- Every name a circular mentions (lowercase), so a circular that named
-- nothing known yet joins the event that later takes one of those names.
CREATE TABLE gcn_mentions (
    alias_key    TEXT NOT NULL,
    circular_id  INTEGER NOT NULL REFERENCES gcn_circulars (circular_id),
    PRIMARY KEY (alias_key, circular_id)
);

-- GCN Notices (VOEvent 2.0 or GCN JSON) by their IVORN (VOEvent) or a key
-- built from the mission, ids and alert time (JSON). `time_ms` is the time
-- the notice locates (the trigger, or the observation of a follow-up);
-- `content` the document as received.
CREATE TABLE gcn_notices (
    ivorn           TEXT PRIMARY KEY,
    dateobs         TEXT NOT NULL REFERENCES gcn_events (dateobs),
    format          TEXT NOT NULL,
    mission         TEXT NOT NULL,
    instrument      TEXT,
    notice_type     TEXT NOT NULL,
    packet_type     INTEGER,
    trigger_id      TEXT,
    time_ms         INTEGER NOT NULL,
    notice_date_ms  INTEGER,
    skymap_url      TEXT,
    source          TEXT NOT NULL,
    checksum        TEXT NOT NULL,
    content         TEXT NOT NULL,
    ingested_at_ms  INTEGER NOT NULL
);

CREATE INDEX gcn_notices_by_event ON gcn_notices (dateobs, time_ms);

-- Positions with an error circle (degrees): one per notice that has one,
-- and those the built-in parser read in circulars (`origin` says which).
-- `dateobs` is NULL while the circular is not attached to an event.
CREATE TABLE gcn_localisations (
    loc_key           TEXT PRIMARY KEY,
    dateobs           TEXT REFERENCES gcn_events (dateobs),
    ra                REAL NOT NULL,
    dec               REAL NOT NULL,
    error_radius_deg  REAL NOT NULL,
    origin            TEXT NOT NULL,
    description       TEXT NOT NULL,
    ivorn             TEXT,
    circular_id       INTEGER,
    time_ms           INTEGER NOT NULL
);

CREATE INDEX gcn_localisations_by_event ON gcn_localisations (dateobs, error_radius_deg);
CREATE INDEX gcn_localisations_by_circular ON gcn_localisations (circular_id);

-- Machine-readable values parsed out of an event's prose. `origin` names the
-- producer (`ithaca-circular-parser` is the built-in one) and `payload` is
-- its own JSON. `tenant_id` is '' for shared rows (the built-in parser,
-- system producers) and a tenant's id for what its own producers added.
-- `producer_key` makes a producer's re-send replace its earlier value.
CREATE TABLE gcn_extractions (
    extraction_id   TEXT PRIMARY KEY,
    tenant_id       TEXT NOT NULL,
    dateobs         TEXT REFERENCES gcn_events (dateobs),
    origin          TEXT NOT NULL,
    kind            TEXT,
    circular_id     INTEGER,
    producer_key    TEXT,
    payload         TEXT NOT NULL,
    created_by      TEXT NOT NULL,
    created_at_ms   INTEGER NOT NULL,
    UNIQUE (tenant_id, origin, producer_key)
);

CREATE INDEX gcn_extractions_by_event ON gcn_extractions (dateobs, origin, created_at_ms);
CREATE INDEX gcn_extractions_by_circular ON gcn_extractions (circular_id);

-- Each tenant's discussion of an event.
CREATE TABLE gcn_comments (
    comment_id     TEXT PRIMARY KEY,
    tenant_id      TEXT NOT NULL,
    dateobs        TEXT NOT NULL REFERENCES gcn_events (dateobs),
    author         TEXT NOT NULL,
    actor          TEXT NOT NULL,
    session_id     TEXT,
    text           TEXT NOT NULL,
    created_at_ms  INTEGER NOT NULL
);

CREATE INDEX gcn_comments_by_event ON gcn_comments (tenant_id, dateobs, created_at_ms);

-- Ingested files; the checksum makes re-ingesting a file a no-op.
CREATE TABLE gcn_files (
    checksum        TEXT PRIMARY KEY,
    source          TEXT NOT NULL,
    kind            TEXT NOT NULL,
    items           INTEGER NOT NULL,
    ingested_at_ms  INTEGER NOT NULL
);
