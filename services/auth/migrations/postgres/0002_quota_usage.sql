-- Shared rate-limit and quota counters: units spent per subject (a key or a
-- tenant) in one fixed window. Edges lease batches from here (LeaseQuota),
-- so every edge replica draws on one budget. Rows are swept once their
-- window has ended.
CREATE TABLE quota_usage (
    subject         TEXT NOT NULL,
    window_ms       BIGINT NOT NULL,
    window_start_ms BIGINT NOT NULL,
    used            BIGINT NOT NULL,
    granted         BIGINT NOT NULL,
    PRIMARY KEY (subject, window_ms, window_start_ms)
);

CREATE INDEX quota_usage_by_end ON quota_usage (window_start_ms);
