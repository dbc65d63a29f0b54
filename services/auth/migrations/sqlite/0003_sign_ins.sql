-- Console sign-ins (the web console owns no state): one row per sign-in
-- with a human key. The sealed console cookie carries the id, and VerifyKey
-- with it succeeds only while the row is open: sign-out (EndSignIn) and
-- revoking the key end it on the server, so a replayed cookie stops
-- working on every edge replica at once. Expired rows are swept.
CREATE TABLE sign_ins (
    sign_in_id    TEXT PRIMARY KEY,
    key_id        TEXT NOT NULL REFERENCES api_keys (key_id),
    tenant_id     TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    expires_at_ms BIGINT NOT NULL,
    ended_at_ms   BIGINT
);

CREATE INDEX sign_ins_by_key ON sign_ins (key_id);
CREATE INDEX sign_ins_by_expiry ON sign_ins (expires_at_ms);
