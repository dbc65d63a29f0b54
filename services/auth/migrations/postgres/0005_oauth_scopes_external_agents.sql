-- An access token may carry fewer scopes than its grant: a refresh that asks
-- for a narrower `scope` (RFC 6749 section 6) issues an access token with
-- just those. NULL: the grant's scopes (every token issued before this, every
-- refresh token, and every access token issued without narrowing).
ALTER TABLE oauth_tokens ADD COLUMN scopes TEXT;

-- Agents whose access tokens an external identity provider issued (the
-- edge's `--oauth-issuer`). The edge verifies those JWTs itself; it records
-- each agent here (the newest expiry it has seen), so GetKey can say whether
-- the agent is still live when an approved call it asked for is about to
-- run, and RevokeKey can stop it in this deployment. Nothing secret: no
-- token is stored.
CREATE TABLE oauth_external_agents (
    tenant_id        TEXT NOT NULL,
    key_id           TEXT NOT NULL,
    issuer           TEXT NOT NULL,
    subject          TEXT NOT NULL,
    client_id        TEXT NOT NULL,
    scopes           TEXT NOT NULL,
    created_at_ms    BIGINT NOT NULL,
    last_seen_at_ms  BIGINT NOT NULL,
    expires_at_ms    BIGINT NOT NULL,
    revoked_at_ms    BIGINT,
    PRIMARY KEY (tenant_id, key_id)
);
