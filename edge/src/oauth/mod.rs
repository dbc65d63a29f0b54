//! Access tokens from external identity providers (`--oauth-issuer`):
//! JWTs (RFC 9068) that Keycloak, Entra ID, Auth0 or Okta issue for this
//! edge, verified here with the issuer's published keys.
//!
//! - [`jwt`]: the compact JWS, its algorithm allow-list, signature and time
//!   claims; [`jwks`]: one issuer's metadata and keys, cached and refreshed;
//!   [`fetch`]: the GETs that read them; [`tenants`]: whether the tenant a
//!   token names exists (the auth service's list, cached).
//!
//! What a token is worth: it acts for the tenant its tenant claim names, as
//! an **agent**, never as a person, whatever it claims: a person's actions
//! (`decide_approval`, …) need a human key. Its scopes are those of its
//! `scope` (or `scp`) claim that this server knows; others are dropped. Its
//! agent id, which sessions are correlated by, is derived from issuer,
//! subject and client, so one user's conversations through one client share
//! a session as one key's do.
//!
//! Never logged: the token. Refusals are logged with their reason only.

pub mod fetch;
pub mod jwks;
pub mod jwt;
pub mod tenants;

use futures::future::BoxFuture;
use ithaca_kit::principal::{Principal, VerifiedKey};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::sync::Arc;

pub use jwt::looks_like_jwt;

/// The claim that names the tenant when none is configured.
pub const DEFAULT_TENANT_CLAIM: &str = "ithaca_tenant";

/// Clock skew tolerated on `exp` and `nbf`, in seconds.
pub const LEEWAY_SECS: i64 = 30;

/// Which external issuers the edge trusts, and for what.
#[derive(Clone, Debug)]
pub struct OAuthConfig {
    /// Issuer identifiers, exactly as their tokens' `iss` spells them.
    pub issuers: Vec<String>,
    /// The claim whose value is the tenant id.
    pub tenant_claim: String,
    /// This edge's canonical resource, `{public_url}/mcp`: a token's `aud`
    /// must contain it (RFC 8707).
    pub resource: String,
}

/// A configuration that cannot work.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--oauth-issuer {0}")]
    Issuer(String),
    #[error("--oauth-tenant-claim must not be empty")]
    TenantClaim,
}

/// Why a token did not verify.
#[derive(Debug, thiserror::Error)]
pub enum TokenFailure {
    /// Refused: the reason is safe to tell the caller (it names no secret).
    #[error("{0}")]
    Invalid(String),
    /// The issuer or the auth service cannot be asked now.
    #[error("{0}")]
    Unavailable(String),
}

/// An agent whose token verified, as recorded with the auth service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeenAgent {
    pub tenant_id: String,
    pub agent_id: String,
    pub issuer: String,
    pub subject: String,
    pub client_id: String,
    pub scopes: Vec<String>,
    /// The token's `exp`, in Unix milliseconds.
    pub expires_at_ms: i64,
}

/// Whether a tenant exists, and the record of external agents (the auth
/// service in production).
pub trait Tenants: Send + Sync {
    /// `Ok(false)` for a tenant that does not exist; `Err` when that cannot
    /// be known now.
    fn exists<'a>(&'a self, tenant_id: &'a str) -> BoxFuture<'a, Result<bool, String>>;

    /// Record that `agent`'s token verified; `Ok(true)` when the agent was
    /// revoked in this deployment. The default keeps no record (a verifier
    /// without an auth service, as in unit tests): nothing is revoked.
    fn record<'a>(&'a self, agent: &'a SeenAgent) -> BoxFuture<'a, Result<bool, String>> {
        let _ = agent;
        Box::pin(async { Ok(false) })
    }
}

/// How long an agent's record answer (revoked or not) is trusted before it
/// is asked again: the bound key revocation has at the edge too. A token
/// with a later expiry is recorded at once.
pub const RECORD_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

/// Agents recorded beyond this are swept of stale answers.
const RECORDED_MAX: usize = 10_000;

/// The newest expiry recorded for an agent, when, and the answer.
type Recorded = std::collections::HashMap<(String, String), (i64, std::time::Instant, bool)>;

/// Verifies external access tokens for one edge.
pub struct Verifier {
    issuers: Vec<Arc<jwks::Issuer>>,
    tenant_claim: String,
    resource: String,
    tenants: Arc<dyn Tenants>,
    recorded: std::sync::Mutex<Recorded>,
}

impl Verifier {
    /// A verifier of `config`'s issuers; nothing is fetched yet (see
    /// [`Verifier::prefetch`]).
    pub fn new(config: OAuthConfig, tenants: Arc<dyn Tenants>) -> Result<Self, ConfigError> {
        if config.tenant_claim.trim().is_empty() {
            return Err(ConfigError::TenantClaim);
        }
        let fetcher = fetch::Fetcher::new().map_err(|e| ConfigError::Issuer(e.to_string()))?;
        let mut issuers = Vec::new();
        for url in config.issuers {
            fetch::check_url(&url).map_err(ConfigError::Issuer)?;
            if url.contains(['?', '#']) {
                return Err(ConfigError::Issuer(format!(
                    "{url}: an issuer identifier has no query or fragment (RFC 8414)"
                )));
            }
            issuers.push(Arc::new(jwks::Issuer::new(url, fetcher.clone())));
        }
        Ok(Verifier {
            issuers,
            tenant_claim: config.tenant_claim,
            resource: config.resource,
            tenants,
            recorded: std::sync::Mutex::default(),
        })
    }

    /// The trusted issuers, as configured (the resource metadata lists them).
    pub fn issuer_urls(&self) -> Vec<String> {
        self.issuers.iter().map(|i| i.url.clone()).collect()
    }

    /// The trusted issuer `url`, if configured (tests read its fetch count).
    pub fn issuer(&self, url: &str) -> Option<&jwks::Issuer> {
        self.issuers.iter().find(|i| i.url == url).map(|i| &**i)
    }

    /// Load every issuer's keys in the background, so the first token does
    /// not wait; an issuer that is down is retried when a token needs it.
    pub fn prefetch(&self) {
        for issuer in &self.issuers {
            let issuer = issuer.clone();
            tokio::spawn(async move {
                if let Err(error) = issuer.preload().await {
                    tracing::warn!(%error, "an oauth issuer's keys could not be loaded; retrying when a token needs them");
                }
            });
        }
    }

    /// The principal of a verified access token.
    pub async fn verify(&self, token: &str) -> Result<Principal, TokenFailure> {
        let invalid = |e: jwt::JwtError| TokenFailure::Invalid(e.to_string());
        let parsed = jwt::parse(token).map_err(invalid)?;
        // The issuer is read before the signature is checked, only to pick
        // whose keys to check it with; it is checked again below.
        let unverified = parsed.claims().map_err(invalid)?;
        let iss = unverified.get("iss").and_then(Value::as_str).unwrap_or("");
        let issuer = self.issuers.iter().find(|i| i.url == iss).ok_or_else(|| {
            TokenFailure::Invalid("the token's issuer is not trusted here".into())
        })?;
        let keys = issuer
            .keys_for(&parsed.alg, parsed.kid.as_deref())
            .await
            .map_err(|e| TokenFailure::Unavailable(e.to_string()))?;
        // Several keys may fit a token without a kid; one must verify.
        let mut refusal = jwt::JwtError::NoKey;
        let mut verified = false;
        for key in &keys {
            match parsed.verify(key) {
                Ok(()) => {
                    verified = true;
                    break;
                }
                Err(e) => refusal = e,
            }
        }
        if !verified {
            return Err(invalid(refusal));
        }
        let claims = unverified;
        let clock = jwt::Clock {
            now: unix_now(),
            leeway: LEEWAY_SECS,
        };
        jwt::check_claims(&claims, &issuer.url, &self.resource, clock).map_err(invalid)?;
        let sub =
            string_claim(&claims, "sub").ok_or_else(|| invalid(jwt::JwtError::Claim("sub")))?;
        // RFC 9068 names the client `client_id`; OpenID providers say `azp`.
        let client = string_claim(&claims, "client_id")
            .or_else(|| string_claim(&claims, "azp"))
            .unwrap_or("");
        let tenant = string_claim(&claims, &self.tenant_claim)
            .filter(|t| t.len() <= 128)
            .ok_or_else(|| {
                TokenFailure::Invalid(format!(
                    "claim {} (the tenant) is missing or malformed",
                    self.tenant_claim
                ))
            })?;
        match self.tenants.exists(tenant).await {
            Ok(true) => {}
            Ok(false) => {
                return Err(TokenFailure::Invalid(format!(
                    "claim {}: no such tenant",
                    self.tenant_claim
                )));
            }
            Err(why) => return Err(TokenFailure::Unavailable(why)),
        }
        let key_id = agent_id(&issuer.url, sub, client);
        let scopes = scopes(&claims);
        let exp = claims.get("exp").and_then(Value::as_i64).unwrap_or(0);
        let seen = SeenAgent {
            tenant_id: tenant.to_owned(),
            agent_id: key_id.clone(),
            issuer: issuer.url.clone(),
            subject: sub.to_owned(),
            client_id: client.to_owned(),
            scopes: scopes.clone(),
            expires_at_ms: exp.saturating_mul(1000),
        };
        if self.revoked_here(&seen).await {
            return Err(TokenFailure::Invalid(
                "this agent was revoked in this deployment".into(),
            ));
        }
        Ok(Principal::verified(VerifiedKey {
            tenant_id: tenant.to_owned(),
            key_id,
            scopes,
            // A token acts as an agent, never as a person: nothing an
            // identity provider says makes it one.
            human: false,
        }))
    }
}

impl Verifier {
    /// Record `seen` with auth (at most once per [`RECORD_INTERVAL`] per
    /// agent, at once for a token expiring later than any recorded), so an
    /// approval the agent asks for can be checked for liveness when it is
    /// decided (auth's `GetKey` answers for the agent id); whether the agent
    /// was revoked here. When auth cannot be asked the token is still
    /// accepted (as the tenant check is, from its cache) and the record is
    /// tried again on the next call: an approval then finds the older
    /// record, which can only make it stricter.
    async fn revoked_here(&self, seen: &SeenAgent) -> bool {
        let key = (seen.tenant_id.clone(), seen.agent_id.clone());
        if let Ok(recorded) = self.recorded.lock()
            && let Some((exp, at, revoked)) = recorded.get(&key)
            && *exp >= seen.expires_at_ms
            && at.elapsed() < RECORD_INTERVAL
        {
            return *revoked;
        }
        match self.tenants.record(seen).await {
            Ok(revoked) => {
                if let Ok(mut recorded) = self.recorded.lock() {
                    if recorded.len() >= RECORDED_MAX {
                        recorded.retain(|_, (_, at, _)| at.elapsed() < RECORD_INTERVAL);
                    }
                    let newest = recorded
                        .get(&key)
                        .map_or(seen.expires_at_ms, |(e, _, _)| (*e).max(seen.expires_at_ms));
                    recorded.insert(key, (newest, std::time::Instant::now(), revoked));
                }
                revoked
            }
            Err(error) => {
                tracing::warn!(%error, "recording an external agent with auth failed; retrying on its next call");
                false
            }
        }
    }
}

/// A string claim that is not empty.
fn string_claim<'a>(claims: &'a serde_json::Map<String, Value>, name: &str) -> Option<&'a str> {
    claims
        .get(name)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// The scopes of a token that this server knows: `scope` (RFC 9068, a
/// space-separated string), or `scp` (Entra ID: a string; Okta: an array).
pub fn scopes(claims: &serde_json::Map<String, Value>) -> Vec<String> {
    let granted: Vec<&str> = match claims.get("scope").or_else(|| claims.get("scp")) {
        Some(Value::String(s)) => s.split_whitespace().collect(),
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    ithaca_proto::scopes::ALL
        .iter()
        .filter(|known| granted.contains(known))
        .map(|s| (*s).to_owned())
        .collect()
}

/// The agent (and key) id of a token's caller: 32 lowercase hex digits, the
/// shape of a key id, derived from issuer, subject and client so the same
/// user through the same client is the same agent across tokens and
/// replicas. Each part is length-prefixed so no two triples collide.
pub fn agent_id(issuer: &str, subject: &str, client: &str) -> String {
    let mut hash = Sha256::new();
    hash.update(b"ithaca oauth agent v1\n");
    for part in [issuer, subject, client] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    hex::encode(&hash.finalize()[..16])
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

#[cfg(test)]
mod tests;
