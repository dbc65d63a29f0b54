-- The built-in OAuth 2.1 authorization server. Codes and tokens are stored
-- only as hex SHA-256 hashes of the random strings handed out (256 bits of
-- entropy each, so no salt is needed to resist guessing).

-- Clients: registered (RFC 7591; `expires_at_ms` set until a person first
-- consents, so unused registrations lapse) or resolved from a Client ID
-- Metadata Document (the id is its HTTPS URL; refreshed on fetch).
CREATE TABLE oauth_clients (
    client_id      TEXT PRIMARY KEY,
    kind           TEXT NOT NULL CHECK (kind IN ('registered', 'metadata_document')),
    client_name    TEXT NOT NULL,
    -- Newline-separated exact redirect URIs.
    redirect_uris  TEXT NOT NULL,
    created_at_ms  BIGINT NOT NULL,
    expires_at_ms  BIGINT
);

CREATE INDEX oauth_clients_by_expiry ON oauth_clients (expires_at_ms);

-- Grants: one person's consent for one client in one tenant. The agent id
-- of its tokens; revoking it stops every token of it.
CREATE TABLE oauth_grants (
    grant_id         TEXT PRIMARY KEY,
    tenant_id        TEXT NOT NULL REFERENCES tenants (tenant_id),
    client_id        TEXT NOT NULL,
    -- The consenting person's key: the grant dies with it.
    key_id           TEXT NOT NULL REFERENCES api_keys (key_id),
    scopes           TEXT NOT NULL,
    resource         TEXT NOT NULL,
    created_at_ms    BIGINT NOT NULL,
    last_used_at_ms  BIGINT,
    revoked_at_ms    BIGINT
);

CREATE INDEX oauth_grants_by_tenant ON oauth_grants (tenant_id, created_at_ms);

-- Authorization codes: single use. `grant_id` is set when the code is
-- exchanged, so a replay can revoke what the first exchange created.
CREATE TABLE oauth_codes (
    code_hash       TEXT PRIMARY KEY,
    client_id       TEXT NOT NULL,
    redirect_uri    TEXT NOT NULL,
    code_challenge  TEXT NOT NULL,
    resource        TEXT NOT NULL,
    scopes          TEXT NOT NULL,
    tenant_id       TEXT NOT NULL,
    key_id          TEXT NOT NULL,
    created_at_ms   BIGINT NOT NULL,
    expires_at_ms   BIGINT NOT NULL,
    used_at_ms      BIGINT,
    grant_id        TEXT
);

CREATE INDEX oauth_codes_by_expiry ON oauth_codes (expires_at_ms);

-- Access and refresh tokens. A refresh token is `rotated` once exchanged;
-- presenting it again revokes its grant.
CREATE TABLE oauth_tokens (
    token_hash     TEXT PRIMARY KEY,
    grant_id       TEXT NOT NULL REFERENCES oauth_grants (grant_id),
    kind           TEXT NOT NULL CHECK (kind IN ('access', 'refresh')),
    created_at_ms  BIGINT NOT NULL,
    expires_at_ms  BIGINT NOT NULL,
    rotated_at_ms  BIGINT,
    revoked_at_ms  BIGINT
);

CREATE INDEX oauth_tokens_by_grant ON oauth_tokens (grant_id);
