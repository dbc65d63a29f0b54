-- The compact filter record of each alert (issue 27): the candidate fields
-- filters cut on most, as typed columns in a narrow table of their own, so
-- a preview reads ~150 bytes per alert instead of the candidate's JSON and
-- the database can apply a pipeline's first cuts itself. A table of its own
-- rather than columns of `alerts`: SQLite appends added columns after the
-- packet, which would put them behind the packet's overflow pages.
--
-- `present` has bit i set when field i of the record (in the order of the
-- columns from `jd`, see `alerts/cuts.rs`) is a key of the candidate; a
-- present key whose column is NULL holds JSON null. `present` = -1 marks an
-- alert whose candidate holds one of these fields with a type the column
-- cannot carry exactly: it is read from its candidate instead.
-- `jd`, `hpx`, `object_id` and `schemavsn` repeat the alert's, for the
-- preview's window, region and document.
CREATE TABLE alert_cuts (
    broker_id    TEXT NOT NULL,
    candid       BIGINT NOT NULL,
    object_id    TEXT NOT NULL,
    schemavsn    TEXT NOT NULL,
    hpx          BIGINT NOT NULL,
    present      BIGINT NOT NULL,
    jd           DOUBLE PRECISION NOT NULL,
    fid          BIGINT,
    programid    BIGINT,
    isdiffpos    TEXT,
    drb          DOUBLE PRECISION,
    rb           DOUBLE PRECISION,
    nbad         BIGINT,
    fwhm         DOUBLE PRECISION,
    elong        DOUBLE PRECISION,
    magpsf       DOUBLE PRECISION,
    sigmapsf     DOUBLE PRECISION,
    ndethist     BIGINT,
    ssdistnr     DOUBLE PRECISION,
    sgscore1     DOUBLE PRECISION,
    distpsnr1    DOUBLE PRECISION,
    jdstarthist  DOUBLE PRECISION,
    PRIMARY KEY (broker_id, candid)
);

CREATE INDEX alert_cuts_by_hpx ON alert_cuts (broker_id, hpx, jd);
CREATE INDEX alert_cuts_spilled ON alert_cuts (broker_id, candid) WHERE present < 0;

-- Backfills of tables derived from the archive, resumable: `cursor_*` is
-- the last alert done, in (broker_id, candid) order (no broker is named ''); `done` = 1 once every
-- alert stored before the backfill began has its row (alerts stored since
-- write their own). An archive without alerts has nothing to backfill.
CREATE TABLE archive_backfills (
    name               TEXT PRIMARY KEY,
    cursor_broker_id   TEXT NOT NULL,
    cursor_candid      BIGINT NOT NULL,
    done               BIGINT NOT NULL,
    updated_at_ms      BIGINT NOT NULL
);

INSERT INTO archive_backfills (name, cursor_broker_id, cursor_candid, done, updated_at_ms)
SELECT 'alert_cuts', '', 0,
       CASE WHEN EXISTS (SELECT 1 FROM alerts) THEN 0 ELSE 1 END, 0;
