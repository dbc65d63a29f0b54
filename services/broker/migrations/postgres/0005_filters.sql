-- Broker filters (seed 003). Streams are reference data shared by every
-- tenant; groups, filters, versions, previews and matches belong to one
-- tenant each (filters, groups and previews carry `tenant_id`; versions
-- and matches hang off a filter).

-- Alert streams: which ZTF programmes an alert must come from
-- (`candidate.programid`, space-separated) and which alert paths the
-- stream withholds (space-separated plain dotted prefixes: the path and
-- everything under it). A cut on a withheld path passes nothing.
CREATE TABLE filter_streams (
    stream_id    TEXT PRIMARY KEY,
    name         TEXT NOT NULL,
    survey       TEXT NOT NULL,
    programids   TEXT NOT NULL,
    withheld     TEXT NOT NULL,
    description  TEXT NOT NULL
);

-- The public stream is modelled on what ZTF's public alerts look like once
-- brokers redistribute them (Fink's stream, for one, carries no forced
-- photometry): programme 1 only, no `fp_hists`, and no `candidate.programpi`
-- (which names the PI of the programme an exposure belongs to).
INSERT INTO filter_streams (stream_id, name, survey, programids, withheld, description)
VALUES ('ztf-public', 'ZTF public', 'ZTF', '1', 'fp_hists candidate.programpi',
        'ZTF public survey alerts (programid 1), without forced photometry or programme PIs');
INSERT INTO filter_streams (stream_id, name, survey, programids, withheld, description)
VALUES ('ztf-partnership', 'ZTF partnership', 'ZTF', '1 2', '',
        'ZTF public and partnership alerts (programids 1 and 2), every path of the packet');

-- A tenant's groups. A tenant gets a `default` group (with every stream)
-- the first time it asks for its filter targets or posts a filter.
CREATE TABLE filter_groups (
    group_id       TEXT PRIMARY KEY,
    tenant_id      TEXT NOT NULL,
    name           TEXT NOT NULL,
    created_at_ms  BIGINT NOT NULL,
    UNIQUE (tenant_id, name)
);

-- The streams each group's filters may use.
CREATE TABLE filter_group_streams (
    group_id   TEXT NOT NULL REFERENCES filter_groups (group_id),
    stream_id  TEXT NOT NULL REFERENCES filter_streams (stream_id),
    PRIMARY KEY (group_id, stream_id)
);

-- Filters. `last_version` numbers the next version; `active_version` is
-- the one run on newly ingested alerts. `autosave` says whether matches
-- are saved and `autosave_keep` how many of the newest are kept.
CREATE TABLE filters (
    filter_id        TEXT PRIMARY KEY,
    tenant_id        TEXT NOT NULL,
    group_id         TEXT NOT NULL REFERENCES filter_groups (group_id),
    stream_id        TEXT NOT NULL REFERENCES filter_streams (stream_id),
    broker_id        TEXT NOT NULL REFERENCES brokers (broker_id),
    name             TEXT NOT NULL,
    autosave         BOOLEAN NOT NULL,
    autosave_keep    BIGINT NOT NULL,
    last_version     BIGINT NOT NULL,
    active_version   BIGINT,
    activated_at_ms  BIGINT,
    created_by       TEXT NOT NULL,
    created_at_ms    BIGINT NOT NULL
);

CREATE INDEX filters_by_tenant ON filters (tenant_id, created_at_ms);
CREATE INDEX filters_active ON filters (active_version) WHERE active_version IS NOT NULL;

-- Versions of a filter: the pipeline (canonical JSON when it compiled, as
-- posted otherwise), its hash, and the latest validation verdict.
CREATE TABLE filter_versions (
    filter_id        TEXT NOT NULL REFERENCES filters (filter_id),
    version          BIGINT NOT NULL,
    pipeline         TEXT NOT NULL,
    pipeline_hash    TEXT NOT NULL,
    created_by       TEXT NOT NULL,
    created_at_ms    BIGINT NOT NULL,
    passed           BOOLEAN NOT NULL,
    problems         TEXT NOT NULL,
    warnings         TEXT NOT NULL,
    validated_at_ms  BIGINT NOT NULL,
    PRIMARY KEY (filter_id, version)
);

-- Which pipelines (SHA-256 of their canonical JSON) were previewed on which
-- stream in which research session: the evidence activation asks for.
CREATE TABLE filter_previews (
    tenant_id        TEXT NOT NULL,
    session_id       TEXT NOT NULL,
    pipeline_hash    TEXT NOT NULL,
    stream_id        TEXT NOT NULL,
    previewed_at_ms  BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, session_id, pipeline_hash, stream_id)
);

-- Alerts an active version passed, kept per the filter's auto-save.
CREATE TABLE filter_matches (
    filter_id      TEXT NOT NULL REFERENCES filters (filter_id),
    candid         BIGINT NOT NULL,
    version        BIGINT NOT NULL,
    broker_id      TEXT NOT NULL,
    object_id      TEXT NOT NULL,
    jd             DOUBLE PRECISION NOT NULL,
    matched_at_ms  BIGINT NOT NULL,
    PRIMARY KEY (filter_id, candid)
);

CREATE INDEX filter_matches_latest ON filter_matches (filter_id, matched_at_ms, candid);
