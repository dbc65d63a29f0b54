-- Issue 26's filter workflow: what each match's version output, and what
-- each recorded preview found (so posting or activating a pipeline whose
-- latest preview matched nothing can warn).

-- The alert as the matching version's pipeline output it (its `$project`
-- and `$addFields`), JSON. Matches saved before this column hold `{}`.
ALTER TABLE filter_matches ADD COLUMN fields TEXT NOT NULL DEFAULT '{}';

-- The latest preview's counts: alerts evaluated, alerts matched, and the
-- alerts each `$match` stage kept (JSON `[[stage, kept], ...]`). NULL for
-- previews recorded before this column.
ALTER TABLE filter_previews ADD COLUMN evaluated INTEGER;
ALTER TABLE filter_previews ADD COLUMN matched INTEGER;
ALTER TABLE filter_previews ADD COLUMN stages TEXT;

-- Finding a tenant's latest preview of a pipeline on a stream, whatever
-- the session.
CREATE INDEX filter_previews_by_hash ON filter_previews (tenant_id, pipeline_hash, stream_id, previewed_at_ms);
