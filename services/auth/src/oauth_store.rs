//! The authorization server's SQL (`oauth_clients`, `oauth_grants`,
//! `oauth_codes`, `oauth_tokens`), written once for SQLite and PostgreSQL.
//! Codes and tokens are looked up by the hex SHA-256 of what was handed out.

use crate::store::Store;
use ithaca_kit::with_pool;

/// A client row.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct ClientRow {
    pub client_id: String,
    /// `registered` or `metadata_document`.
    pub kind: String,
    pub client_name: String,
    /// Newline-separated.
    pub redirect_uris: String,
    pub created_at_ms: i64,
    pub expires_at_ms: Option<i64>,
}

impl ClientRow {
    pub fn redirect_uris(&self) -> Vec<String> {
        self.redirect_uris.lines().map(str::to_owned).collect()
    }
}

/// A grant row.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct GrantRow {
    pub grant_id: String,
    pub tenant_id: String,
    pub client_id: String,
    pub key_id: String,
    /// Space-separated.
    pub scopes: String,
    pub resource: String,
    pub created_at_ms: i64,
    pub last_used_at_ms: Option<i64>,
    pub revoked_at_ms: Option<i64>,
}

/// An authorization code row (its hash, never the code).
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct CodeRow {
    pub code_hash: String,
    pub client_id: String,
    pub redirect_uri: String,
    pub code_challenge: String,
    pub resource: String,
    pub scopes: String,
    pub tenant_id: String,
    pub key_id: String,
    pub created_at_ms: i64,
    pub expires_at_ms: i64,
    pub used_at_ms: Option<i64>,
    pub grant_id: Option<String>,
}

/// A token row (its hash, never the token).
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct TokenRow {
    pub token_hash: String,
    pub grant_id: String,
    /// `access` or `refresh`.
    pub kind: String,
    pub created_at_ms: i64,
    pub expires_at_ms: i64,
    pub rotated_at_ms: Option<i64>,
    pub revoked_at_ms: Option<i64>,
    /// Space-separated; `None`: the grant's. An access token a refresh
    /// narrowed (RFC 6749 section 6) carries its own, a subset of the
    /// grant's.
    pub scopes: Option<String>,
}

/// An agent of an external identity provider, as the edges recorded it
/// (no token: who, and the newest expiry seen).
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct ExternalAgentRow {
    pub tenant_id: String,
    pub key_id: String,
    pub issuer: String,
    pub subject: String,
    pub client_id: String,
    /// Space-separated.
    pub scopes: String,
    pub created_at_ms: i64,
    pub last_seen_at_ms: i64,
    pub expires_at_ms: i64,
    pub revoked_at_ms: Option<i64>,
}

const EXTERNAL_AGENT_COLUMNS: &str = "tenant_id, key_id, issuer, subject, client_id, scopes, \
     created_at_ms, last_seen_at_ms, expires_at_ms, revoked_at_ms";

const CLIENT_COLUMNS: &str =
    "client_id, kind, client_name, redirect_uris, created_at_ms, expires_at_ms";
const GRANT_COLUMNS: &str = "grant_id, tenant_id, client_id, key_id, scopes, resource, \
     created_at_ms, last_used_at_ms, revoked_at_ms";
const CODE_COLUMNS: &str = "code_hash, client_id, redirect_uri, code_challenge, resource, scopes, \
     tenant_id, key_id, created_at_ms, expires_at_ms, used_at_ms, grant_id";
const TOKEN_COLUMNS: &str = "token_hash, grant_id, kind, created_at_ms, expires_at_ms, rotated_at_ms, \
     revoked_at_ms, scopes";

/// How many rows a statement changed.
type Affected = Result<u64, sqlx::Error>;

impl Store {
    /// Insert a client, or replace a metadata-document client's name and
    /// redirect URIs (it was fetched again).
    pub async fn upsert_client(&self, row: &ClientRow) -> Result<(), sqlx::Error> {
        let _gate = self.db().write_gate().await;
        let sql = format!(
            "INSERT INTO oauth_clients ({CLIENT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (client_id) DO UPDATE SET client_name = $3, redirect_uris = $4"
        );
        with_pool!(self.db(), pool => sqlx::query(&sql)
            .bind(&row.client_id)
            .bind(&row.kind)
            .bind(&row.client_name)
            .bind(&row.redirect_uris)
            .bind(row.created_at_ms)
            .bind(row.expires_at_ms)
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))?;
        Ok(())
    }

    pub async fn find_client(&self, client_id: &str) -> Result<Option<ClientRow>, sqlx::Error> {
        let sql = format!("SELECT {CLIENT_COLUMNS} FROM oauth_clients WHERE client_id = $1");
        with_pool!(self.db(), pool => sqlx::query_as::<_, ClientRow>(&sql)
            .bind(client_id)
            .fetch_optional(pool)
            .await)
    }

    /// A person consented to the client: its registration no longer lapses.
    pub async fn keep_client(&self, client_id: &str) -> Affected {
        let _gate = self.db().write_gate().await;
        let sql = "UPDATE oauth_clients SET expires_at_ms = NULL WHERE client_id = $1";
        with_pool!(self.db(), pool => sqlx::query(sql)
            .bind(client_id)
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))
    }

    /// Delete lapsed registrations and codes that expired before `now_ms`.
    pub async fn sweep_oauth(&self, now_ms: i64) -> Affected {
        let _gate = self.db().write_gate().await;
        let clients = "DELETE FROM oauth_clients WHERE expires_at_ms < $1";
        let codes = "DELETE FROM oauth_codes WHERE expires_at_ms < $1";
        let a = with_pool!(self.db(), pool => sqlx::query(clients).bind(now_ms).execute(pool).await.map(|r| r.rows_affected()))?;
        let b = with_pool!(self.db(), pool => sqlx::query(codes).bind(now_ms).execute(pool).await.map(|r| r.rows_affected()))?;
        Ok(a + b)
    }

    pub async fn insert_code(&self, row: &CodeRow) -> Result<(), sqlx::Error> {
        let _gate = self.db().write_gate().await;
        let sql = format!(
            "INSERT INTO oauth_codes ({CODE_COLUMNS}) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)"
        );
        with_pool!(self.db(), pool => sqlx::query(&sql)
            .bind(&row.code_hash)
            .bind(&row.client_id)
            .bind(&row.redirect_uri)
            .bind(&row.code_challenge)
            .bind(&row.resource)
            .bind(&row.scopes)
            .bind(&row.tenant_id)
            .bind(&row.key_id)
            .bind(row.created_at_ms)
            .bind(row.expires_at_ms)
            .bind(row.used_at_ms)
            .bind(&row.grant_id)
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))?;
        Ok(())
    }

    pub async fn find_code(&self, code_hash: &str) -> Result<Option<CodeRow>, sqlx::Error> {
        let sql = format!("SELECT {CODE_COLUMNS} FROM oauth_codes WHERE code_hash = $1");
        with_pool!(self.db(), pool => sqlx::query_as::<_, CodeRow>(&sql)
            .bind(code_hash)
            .fetch_optional(pool)
            .await)
    }

    /// Mark a code used, only if it was not: 1 for the one caller that wins
    /// a race, 0 for every other (a replay).
    pub async fn use_code(&self, code_hash: &str, now_ms: i64) -> Affected {
        let _gate = self.db().write_gate().await;
        let sql =
            "UPDATE oauth_codes SET used_at_ms = $2 WHERE code_hash = $1 AND used_at_ms IS NULL";
        with_pool!(self.db(), pool => sqlx::query(sql)
            .bind(code_hash)
            .bind(now_ms)
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))
    }

    /// Record the grant a used code created, for revoking it on a replay.
    pub async fn set_code_grant(&self, code_hash: &str, grant_id: &str) -> Affected {
        let _gate = self.db().write_gate().await;
        let sql = "UPDATE oauth_codes SET grant_id = $2 WHERE code_hash = $1";
        with_pool!(self.db(), pool => sqlx::query(sql)
            .bind(code_hash)
            .bind(grant_id)
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))
    }

    pub async fn insert_grant(&self, row: &GrantRow) -> Result<(), sqlx::Error> {
        let _gate = self.db().write_gate().await;
        let sql = format!(
            "INSERT INTO oauth_grants ({GRANT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
        );
        with_pool!(self.db(), pool => sqlx::query(&sql)
            .bind(&row.grant_id)
            .bind(&row.tenant_id)
            .bind(&row.client_id)
            .bind(&row.key_id)
            .bind(&row.scopes)
            .bind(&row.resource)
            .bind(row.created_at_ms)
            .bind(row.last_used_at_ms)
            .bind(row.revoked_at_ms)
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))?;
        Ok(())
    }

    pub async fn find_grant(&self, grant_id: &str) -> Result<Option<GrantRow>, sqlx::Error> {
        let sql = format!("SELECT {GRANT_COLUMNS} FROM oauth_grants WHERE grant_id = $1");
        with_pool!(self.db(), pool => sqlx::query_as::<_, GrantRow>(&sql)
            .bind(grant_id)
            .fetch_optional(pool)
            .await)
    }

    /// A tenant's grants, newest first.
    pub async fn list_grants(
        &self,
        tenant_id: &str,
        include_revoked: bool,
    ) -> Result<Vec<GrantRow>, sqlx::Error> {
        let sql = format!(
            "SELECT {GRANT_COLUMNS} FROM oauth_grants WHERE tenant_id = $1 \
             AND ($2 OR revoked_at_ms IS NULL) ORDER BY created_at_ms DESC, grant_id"
        );
        with_pool!(self.db(), pool => sqlx::query_as::<_, GrantRow>(&sql)
            .bind(tenant_id)
            .bind(include_revoked)
            .fetch_all(pool)
            .await)
    }

    /// Revoke a grant (keeping the first revocation time); its tokens stop
    /// verifying because verification checks the grant.
    pub async fn revoke_grant(&self, grant_id: &str, now_ms: i64) -> Affected {
        let _gate = self.db().write_gate().await;
        let sql = "UPDATE oauth_grants SET revoked_at_ms = COALESCE(revoked_at_ms, $2) \
                   WHERE grant_id = $1";
        with_pool!(self.db(), pool => sqlx::query(sql)
            .bind(grant_id)
            .bind(now_ms)
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))
    }

    /// Record a use of a grant, at most once per `min_interval_ms`.
    pub async fn touch_grant(&self, grant_id: &str, now_ms: i64, min_interval_ms: i64) -> Affected {
        let _gate = self.db().write_gate().await;
        let sql = "UPDATE oauth_grants SET last_used_at_ms = $2 WHERE grant_id = $1 \
                   AND (last_used_at_ms IS NULL OR last_used_at_ms <= $3)";
        with_pool!(self.db(), pool => sqlx::query(sql)
            .bind(grant_id)
            .bind(now_ms)
            .bind(now_ms - min_interval_ms)
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))
    }

    pub async fn insert_token(&self, row: &TokenRow) -> Result<(), sqlx::Error> {
        let _gate = self.db().write_gate().await;
        let sql = format!(
            "INSERT INTO oauth_tokens ({TOKEN_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
        );
        with_pool!(self.db(), pool => sqlx::query(&sql)
            .bind(&row.token_hash)
            .bind(&row.grant_id)
            .bind(&row.kind)
            .bind(row.created_at_ms)
            .bind(row.expires_at_ms)
            .bind(row.rotated_at_ms)
            .bind(row.revoked_at_ms)
            .bind(&row.scopes)
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))?;
        Ok(())
    }

    pub async fn find_token(&self, token_hash: &str) -> Result<Option<TokenRow>, sqlx::Error> {
        let sql = format!("SELECT {TOKEN_COLUMNS} FROM oauth_tokens WHERE token_hash = $1");
        with_pool!(self.db(), pool => sqlx::query_as::<_, TokenRow>(&sql)
            .bind(token_hash)
            .fetch_optional(pool)
            .await)
    }

    /// Mark a refresh token rotated, only if it was not: 1 for the caller
    /// that wins, 0 for a replay.
    pub async fn rotate_token(&self, token_hash: &str, now_ms: i64) -> Affected {
        let _gate = self.db().write_gate().await;
        let sql = "UPDATE oauth_tokens SET rotated_at_ms = $2 \
                   WHERE token_hash = $1 AND rotated_at_ms IS NULL";
        with_pool!(self.db(), pool => sqlx::query(sql)
            .bind(token_hash)
            .bind(now_ms)
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))
    }

    pub async fn revoke_token(&self, token_hash: &str, now_ms: i64) -> Affected {
        let _gate = self.db().write_gate().await;
        let sql = "UPDATE oauth_tokens SET revoked_at_ms = COALESCE(revoked_at_ms, $2) \
                   WHERE token_hash = $1";
        with_pool!(self.db(), pool => sqlx::query(sql)
            .bind(token_hash)
            .bind(now_ms)
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))
    }

    /// Every stored token hash (tests check that no plain token is kept).
    pub async fn token_hashes(&self) -> Result<Vec<String>, sqlx::Error> {
        let sql = "SELECT token_hash FROM oauth_tokens UNION ALL SELECT code_hash FROM oauth_codes";
        with_pool!(self.db(), pool => sqlx::query_scalar(sql).fetch_all(pool).await)
    }

    /// Record an external agent's token: a new row, or the newest expiry,
    /// scopes and last sight of a known one (an older token never shortens
    /// the expiry; a revocation stays).
    pub async fn record_external_agent(&self, row: &ExternalAgentRow) -> Result<(), sqlx::Error> {
        let _gate = self.db().write_gate().await;
        let sql = format!(
            "INSERT INTO oauth_external_agents ({EXTERNAL_AGENT_COLUMNS}) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
             ON CONFLICT (tenant_id, key_id) DO UPDATE SET \
             scopes = excluded.scopes, last_seen_at_ms = excluded.last_seen_at_ms, \
             expires_at_ms = CASE WHEN excluded.expires_at_ms > oauth_external_agents.expires_at_ms \
             THEN excluded.expires_at_ms ELSE oauth_external_agents.expires_at_ms END"
        );
        with_pool!(self.db(), pool => sqlx::query(&sql)
            .bind(&row.tenant_id)
            .bind(&row.key_id)
            .bind(&row.issuer)
            .bind(&row.subject)
            .bind(&row.client_id)
            .bind(&row.scopes)
            .bind(row.created_at_ms)
            .bind(row.last_seen_at_ms)
            .bind(row.expires_at_ms)
            .bind(row.revoked_at_ms)
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))?;
        Ok(())
    }

    /// An external agent of `tenant_id`.
    pub async fn find_external_agent(
        &self,
        tenant_id: &str,
        key_id: &str,
    ) -> Result<Option<ExternalAgentRow>, sqlx::Error> {
        let sql = format!(
            "SELECT {EXTERNAL_AGENT_COLUMNS} FROM oauth_external_agents \
             WHERE tenant_id = $1 AND key_id = $2"
        );
        with_pool!(self.db(), pool => sqlx::query_as::<_, ExternalAgentRow>(&sql)
            .bind(tenant_id)
            .bind(key_id)
            .fetch_optional(pool)
            .await)
    }

    /// Revoke an external agent of `tenant_id` (keeping the first time).
    pub async fn revoke_external_agent(
        &self,
        tenant_id: &str,
        key_id: &str,
        now_ms: i64,
    ) -> Affected {
        let _gate = self.db().write_gate().await;
        let sql = "UPDATE oauth_external_agents SET revoked_at_ms = COALESCE(revoked_at_ms, $3) \
                   WHERE tenant_id = $1 AND key_id = $2";
        with_pool!(self.db(), pool => sqlx::query(sql)
            .bind(tenant_id)
            .bind(key_id)
            .bind(now_ms)
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))
    }
}
