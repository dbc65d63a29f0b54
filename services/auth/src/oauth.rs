//! The built-in OAuth 2.1 authorization server's domain: clients, one-use
//! authorization codes bound to PKCE S256, grants, and rotating tokens.
//!
//! An access token is `ithaca_at_<43 base64url>` and a refresh token
//! `ithaca_rt_<43 base64url>`: opaque, 256 random bits, and never of the
//! shape of an API key (`dmbg_<env>_…` starts with another word whatever
//! the env) nor of a JWT (no dots). Only `hex(sha256(token))` is stored.
//!
//! Why a token is always an AGENT: it acts for an app the person connected,
//! not for the person. Whatever was consented, the approvals a person must
//! decide stay out of its reach (`approvals:decide` is never granted, and
//! services check the actor, which is never human here).

use crate::model::{KeyActor, KeyId, Scope};
use crate::oauth_store::{ClientRow, CodeRow, GrantRow, TokenRow};
use crate::service::{
    AuthService, INVALID_KEY, LAST_USED_INTERVAL_MS, Verified, due, last_use_due, require_system,
};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ithaca_kit::clock;
use ithaca_kit::error::{Code, ServiceError};
use ithaca_kit::id::TenantId;
use ithaca_kit::principal::Principal;
use sha2::{Digest, Sha256};

pub use crate::oauth_config::{ACCESS_PREFIX, OAuthConfig, REFRESH_PREFIX};

/// What a person consents to (IssueCode).
#[derive(Clone, Debug, Default)]
pub struct CodeSpec {
    pub client_id: String,
    pub redirect_uri: String,
    pub code_challenge: String,
    pub resource: String,
    pub scopes: Vec<String>,
}

/// What the token endpoint presents for a code.
#[derive(Clone, Debug, Default)]
pub struct Exchange {
    pub code: String,
    pub client_id: String,
    pub redirect_uri: String,
    pub code_verifier: String,
    pub resource: String,
}

/// A newly issued code, returned once.
#[derive(Debug)]
pub struct NewCode {
    pub code: String,
    pub expires_in_secs: i64,
}

/// Tokens issued at the token endpoint, returned once.
#[derive(Debug)]
pub struct Tokens {
    pub access_token: String,
    pub refresh_token: String,
    pub expires_in_secs: i64,
    pub scope: String,
    pub grant_id: String,
}

/// A grant as listed, with its client's name.
#[derive(Debug, Clone)]
pub struct GrantView {
    pub row: GrantRow,
    pub client_name: String,
}

/// A refusal of the token endpoint (`invalid_grant` in RFC 6749 terms).
pub(crate) fn invalid_grant(message: impl Into<String>) -> ServiceError {
    ServiceError::new(Code::FailedPrecondition, message)
}

/// `hex(sha256(s))`: how codes and tokens are stored and found.
pub fn hash(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

fn random_secret() -> String {
    URL_SAFE_NO_PAD.encode(rand::random::<[u8; 32]>())
}

pub(crate) fn new_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// The S256 transform of RFC 7636: `base64url(sha256(verifier))`.
pub fn s256(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// RFC 7636's verifier: 43 to 128 unreserved characters.
pub(crate) fn verifier_ok(v: &str) -> bool {
    (43..=128).contains(&v.len())
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
}

/// An S256 challenge: 43 base64url characters.
fn challenge_ok(c: &str) -> bool {
    c.len() == 43
        && c.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// A prefixed opaque token of the right shape.
pub(crate) fn token_shape_ok(token: &str, prefix: &str) -> bool {
    token.strip_prefix(prefix).is_some_and(|s| {
        s.len() == 43
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    })
}

fn check_redirect_uris(uris: &[String]) -> Result<String, ServiceError> {
    if uris.is_empty() || uris.len() > 10 {
        return Err(ServiceError::invalid(
            "redirect_uris: between 1 and 10 are required",
        ));
    }
    for uri in uris {
        if uri.is_empty() || uri.len() > 2000 || uri.chars().any(char::is_control) {
            return Err(ServiceError::invalid(
                "redirect_uris: each must be 1 to 2000 characters without control characters",
            ));
        }
    }
    Ok(uris.join("\n"))
}

fn check_name(name: &str) -> Result<String, ServiceError> {
    let name = name.trim();
    if name.chars().count() > 200 {
        return Err(ServiceError::invalid("client_name: at most 200 characters"));
    }
    Ok(name.to_owned())
}

impl AuthService {
    /// The same service with other lifetimes for codes and tokens.
    pub fn with_oauth(mut self, config: OAuthConfig) -> Self {
        self.oauth = config;
        self
    }

    /// Register a client (RFC 7591); it lapses unless a person consents
    /// within [`OAuthConfig::registration_ttl_ms`].
    pub async fn register_client(
        &self,
        caller: &Principal,
        client_name: &str,
        redirect_uris: &[String],
    ) -> Result<ClientRow, ServiceError> {
        require_system(caller)?;
        let now = clock::now_ms();
        let row = ClientRow {
            client_id: new_id(),
            kind: "registered".to_owned(),
            client_name: check_name(client_name)?,
            redirect_uris: check_redirect_uris(redirect_uris)?,
            created_at_ms: now,
            expires_at_ms: Some(now + self.oauth.registration_ttl_ms),
        };
        self.store.upsert_client(&row).await?;
        tracing::info!(client_id = %row.client_id, "oauth client registered");
        self.sweep_oauth(now).await;
        Ok(row)
    }

    /// Record a client resolved from its metadata document.
    pub async fn put_metadata_client(
        &self,
        caller: &Principal,
        client_id: &str,
        client_name: &str,
        redirect_uris: &[String],
    ) -> Result<ClientRow, ServiceError> {
        require_system(caller)?;
        if !(client_id.starts_with("https://") || client_id.starts_with("http://"))
            || client_id.len() > 2000
        {
            return Err(ServiceError::invalid(
                "client_id: a metadata document client's id is its URL",
            ));
        }
        let row = ClientRow {
            client_id: client_id.to_owned(),
            kind: "metadata_document".to_owned(),
            client_name: check_name(client_name)?,
            redirect_uris: check_redirect_uris(redirect_uris)?,
            created_at_ms: clock::now_ms(),
            expires_at_ms: None,
        };
        self.store.upsert_client(&row).await?;
        Ok(self.find_client(client_id).await?.unwrap_or(row))
    }

    /// A client that has not lapsed.
    pub async fn get_client(
        &self,
        caller: &Principal,
        client_id: &str,
    ) -> Result<ClientRow, ServiceError> {
        require_system(caller)?;
        self.find_client(client_id)
            .await?
            .ok_or_else(|| ServiceError::not_found("client_id: unknown client"))
    }

    async fn find_client(&self, client_id: &str) -> Result<Option<ClientRow>, ServiceError> {
        let now = clock::now_ms();
        Ok(self
            .store
            .find_client(client_id)
            .await?
            .filter(|c| c.expires_at_ms.is_none_or(|at| at > now)))
    }

    /// Issue a code for the calling person's consent.
    pub async fn issue_code(
        &self,
        caller: &Principal,
        spec: CodeSpec,
    ) -> Result<NewCode, ServiceError> {
        let key = self.own_human_key(caller).await?;
        let client = self
            .find_client(&spec.client_id)
            .await?
            .ok_or_else(|| ServiceError::not_found("client_id: unknown client"))?;
        if !client.redirect_uris().contains(&spec.redirect_uri) {
            return Err(ServiceError::invalid(
                "redirect_uri: not one of the client's redirect URIs",
            ));
        }
        if !challenge_ok(&spec.code_challenge) {
            return Err(ServiceError::invalid(
                "code_challenge: must be an S256 challenge (43 base64url characters)",
            ));
        }
        if spec.resource.is_empty() || spec.resource.len() > 2000 {
            return Err(ServiceError::invalid("resource: required"));
        }
        let held: Vec<&str> = key.scopes.split_whitespace().collect();
        let mut scopes = Vec::new();
        for name in &spec.scopes {
            let scope = Scope::parse(name.trim())
                .map_err(|e| ServiceError::invalid(format!("scopes: {e}")))?;
            if scope == Scope::ApprovalsDecide {
                return Err(ServiceError::invalid(
                    "scopes: approvals:decide is never granted to an app (its tokens act as agents)",
                ));
            }
            if !held.contains(&scope.as_str()) {
                return Err(ServiceError::denied(format!(
                    "scopes: your key does not hold {scope}"
                )));
            }
            if !scopes.contains(&scope) {
                scopes.push(scope);
            }
        }
        if scopes.is_empty() {
            return Err(ServiceError::invalid("scopes: allow at least one scope"));
        }
        scopes.sort();
        let code = random_secret();
        let now = clock::now_ms();
        let row = CodeRow {
            code_hash: hash(&code),
            client_id: client.client_id.clone(),
            redirect_uri: spec.redirect_uri,
            code_challenge: spec.code_challenge,
            resource: spec.resource,
            scopes: scopes
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(" "),
            tenant_id: key.tenant_id.to_string(),
            key_id: key.key_id.to_string(),
            created_at_ms: now,
            expires_at_ms: now + self.oauth.code_ttl_ms,
            used_at_ms: None,
            grant_id: None,
        };
        self.store.insert_code(&row).await?;
        self.store.keep_client(&client.client_id).await?;
        tracing::info!(client_id = %client.client_id, tenant_id = %row.tenant_id, key_id = %row.key_id, "oauth consent: code issued");
        Ok(NewCode {
            code,
            expires_in_secs: self.oauth.code_ttl_ms / 1000,
        })
    }

    /// The grants of a tenant (a person's own, or one a system caller names).
    pub async fn list_grants(
        &self,
        caller: &Principal,
        tenant_id: &str,
        include_revoked: bool,
    ) -> Result<Vec<GrantView>, ServiceError> {
        let tenant = self.target_tenant(caller, tenant_id).await?;
        let rows = self
            .store
            .list_grants(tenant.as_str(), include_revoked)
            .await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let client_name = self
                .store
                .find_client(&row.client_id)
                .await?
                .map(|c| c.client_name)
                .unwrap_or_default();
            out.push(GrantView { row, client_name });
        }
        Ok(out)
    }

    /// Revoke a grant of the caller's tenant.
    pub async fn revoke_grant(
        &self,
        caller: &Principal,
        grant_id: &str,
    ) -> Result<GrantView, ServiceError> {
        let tenant = self.target_tenant(caller, "").await?;
        let not_found = || ServiceError::not_found(format!("grant_id: no grant {grant_id}"));
        let grant = self
            .store
            .find_grant(grant_id.trim())
            .await?
            .filter(|g| g.tenant_id == tenant.as_str())
            .ok_or_else(not_found)?;
        self.store
            .revoke_grant(&grant.grant_id, clock::now_ms())
            .await?;
        tracing::info!(grant_id = %grant.grant_id, tenant_id = %grant.tenant_id, "oauth grant revoked");
        let row = self
            .store
            .find_grant(&grant.grant_id)
            .await?
            .ok_or_else(not_found)?;
        let client_name = self
            .store
            .find_client(&row.client_id)
            .await?
            .map(|c| c.client_name)
            .unwrap_or_default();
        Ok(GrantView { row, client_name })
    }

    /// VerifyKey for an access token: live token, live grant, live
    /// consenting key; an agent of the grant's tenant.
    pub(crate) async fn verify_access_token(&self, token: &str) -> Result<Verified, ServiceError> {
        let unauthenticated = || ServiceError::new(Code::Unauthenticated, INVALID_KEY);
        if !token_shape_ok(token, ACCESS_PREFIX) {
            return Err(unauthenticated());
        }
        let now = clock::now_ms();
        let Some(row) = self.store.find_token(&hash(token)).await? else {
            return Err(unauthenticated());
        };
        if row.kind != "access" || row.revoked_at_ms.is_some() || now >= row.expires_at_ms {
            return Err(unauthenticated());
        }
        let Some(grant) = self.store.find_grant(&row.grant_id).await? else {
            return Err(unauthenticated());
        };
        if grant.revoked_at_ms.is_some() {
            return Err(unauthenticated());
        }
        let Some(key) = self.active_key(&grant.key_id, &grant.tenant_id).await? else {
            return Err(unauthenticated());
        };
        // Never more than the person's key holds now (a key's scopes do not
        // change today, but a token must not outlive a narrowing).
        // An access token a refresh narrowed carries its own scopes (a
        // subset of the grant's, checked when it was issued).
        let held: Vec<&str> = key.scopes.split_whitespace().collect();
        let token_scopes = row.scopes.as_deref().unwrap_or(&grant.scopes);
        let granted: Vec<&str> = grant.scopes.split_whitespace().collect();
        let scopes = token_scopes
            .split_whitespace()
            .filter(|s| granted.contains(s))
            .filter(|s| held.contains(s) && *s != Scope::ApprovalsDecide.as_str())
            .map(str::to_owned)
            .collect();
        // A grant's last use is rewritten at most as often as a key's.
        if last_use_due(grant.last_used_at_ms, now)
            && let Err(error) = self
                .store
                .touch_grant(&grant.grant_id, now, LAST_USED_INTERVAL_MS)
                .await
        {
            tracing::warn!(%error, grant_id = %grant.grant_id, "recording a grant's last use failed");
        }
        Ok(Verified {
            tenant_id: TenantId::parse(&grant.tenant_id).map_err(|_| unauthenticated())?,
            key_id: KeyId::parse(&grant.grant_id).map_err(|_| unauthenticated())?,
            scopes,
            actor: KeyActor::Agent,
            resource: grant.resource,
        })
    }

    /// The consenting person's key, if still active in `tenant_id`.
    pub(crate) async fn active_key(
        &self,
        key_id: &str,
        tenant_id: &str,
    ) -> Result<Option<crate::store::KeyRow>, ServiceError> {
        let Ok(key_id) = KeyId::parse(key_id) else {
            return Ok(None);
        };
        Ok(self
            .store
            .find_key(&key_id)
            .await?
            .filter(|k| k.revoked_at_ms.is_none() && k.tenant_id.as_str() == tenant_id))
    }

    /// Issue an access and a refresh token for `grant`. The access token
    /// carries `narrowed` when a refresh asked for fewer scopes (RFC 6749
    /// section 6); the refresh token always keeps the grant's.
    pub(crate) async fn mint(
        &self,
        grant: &GrantRow,
        narrowed: Option<String>,
        now: i64,
    ) -> Result<Tokens, ServiceError> {
        let access_token = format!("{ACCESS_PREFIX}{}", random_secret());
        let refresh_token = format!("{REFRESH_PREFIX}{}", random_secret());
        for (token, kind, ttl, scopes) in [
            (
                &access_token,
                "access",
                self.oauth.access_ttl_ms,
                narrowed.clone(),
            ),
            (&refresh_token, "refresh", self.oauth.refresh_ttl_ms, None),
        ] {
            self.store
                .insert_token(&TokenRow {
                    token_hash: hash(token),
                    grant_id: grant.grant_id.clone(),
                    kind: kind.to_owned(),
                    created_at_ms: now,
                    expires_at_ms: now + ttl,
                    rotated_at_ms: None,
                    revoked_at_ms: None,
                    scopes,
                })
                .await?;
        }
        Ok(Tokens {
            access_token,
            refresh_token,
            expires_in_secs: self.oauth.access_ttl_ms / 1000,
            scope: narrowed.unwrap_or_else(|| grant.scopes.clone()),
            grant_id: grant.grant_id.clone(),
        })
    }

    /// Delete lapsed registrations and expired codes, about once a minute.
    async fn sweep_oauth(&self, now: i64) {
        if !due(&self.oauth_swept_at_ms, now) {
            return;
        }
        if let Err(error) = self.store.sweep_oauth(now).await {
            tracing::warn!(%error, "sweeping lapsed oauth registrations failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s256_matches_rfc_7636_appendix_b() {
        assert_eq!(
            s256("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }

    #[test]
    fn tokens_never_take_a_key_or_jwt_shape() {
        let t = format!("{ACCESS_PREFIX}{}", random_secret());
        assert!(token_shape_ok(&t, ACCESS_PREFIX));
        assert!(crate::model::parse_token(&t).is_none());
        assert!(!t.contains('.'));
        assert!(!token_shape_ok(&format!("{t}x"), ACCESS_PREFIX));
    }
}
