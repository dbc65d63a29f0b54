-- The principal a queued run executes as (JSON), for batch runs picked up
-- by the background worker.
ALTER TABLE runs ADD COLUMN requester TEXT NOT NULL DEFAULT '';
