-- Every trace append moves its session's `last_seq` and `updated_at_ms`.
-- With `updated_at_ms` in an index, each commit also rewrote a page of that
-- index: a quarter of the pages, and so of the write-ahead log, that one
-- append's commit writes (README, issue 23, stop 49). The sweeper's two
-- questions need no such index: closed sessions are found by when they
-- closed, which appends never change, and idle open sessions by a scan of
-- the open ones, once a sweep.
DROP INDEX IF EXISTS sessions_by_status_updated;
CREATE INDEX sessions_by_status_closed ON sessions (status, closed_at_ms);
