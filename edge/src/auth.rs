//! Bearer keys: verified by the auth service over gRPC, cached briefly.
//!
//! A verified principal is cached for at most [`MAX_CACHE_TTL`], keyed by the
//! SHA-256 of the token (the token itself is not kept), so a revoked key stops
//! working within that bound. Failures are not cached; they are counted
//! (`throttle.rs`): a door that [`Authenticator::check`]s a key refuses a
//! key id or a client address that failed too often, without asking auth.

use crate::throttle::Failures;
use ithaca_kit::client::Outbound;
use ithaca_kit::principal::{InternalKey, Principal, VerifiedKey};
use ithaca_proto::auth::v1 as pb;
use ithaca_proto::auth::v1::auth_service_client::AuthServiceClient;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

/// The longest a verified key is trusted without asking auth again.
pub const MAX_CACHE_TTL: Duration = Duration::from_secs(5);

/// Entries beyond this are swept of expired ones before inserting.
const SWEEP_AT: usize = 10_000;

/// Why a request is not authenticated.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AuthFailure {
    #[error("missing bearer token")]
    Missing,
    #[error("invalid api key")]
    Invalid,
    /// An external access token (`--oauth-issuer`) was refused; the reason
    /// names what was wrong and never the token.
    #[error("invalid access token: {0}")]
    Token(String),
    #[error("the auth service is unavailable: {0}")]
    Unavailable(String),
}

/// Why a door refused a key: the check failed, or it was not made.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CheckFailure {
    #[error(transparent)]
    Auth(#[from] AuthFailure),
    /// The key id or the client address failed too often lately; auth was
    /// not asked. Try again after the duration (whole seconds, at least 1).
    #[error("too many failed key checks from this key id or address; retry in {} s", .0.as_secs())]
    Throttled(Duration),
}

/// The shortest pause between two checks of an open stream's key, so a
/// cache of zero does not make a busy loop.
const MIN_RECHECK: Duration = Duration::from_secs(1);

/// Verifies bearer tokens.
pub struct Authenticator {
    client: AuthServiceClient<InterceptedService<Channel, Outbound>>,
    ttl: Duration,
    /// How long auth may take to answer before the request is refused as
    /// "authentication unavailable" (a stalled auth service must not hold
    /// every request open).
    timeout: Duration,
    cache: Mutex<HashMap<[u8; 32], (Instant, Principal)>>,
    /// Failed checks per key id and client address; shared by the doors of
    /// one process (the edge and its console), so a client throttled at
    /// one is throttled at all.
    failures: Arc<Failures>,
    /// The canonical MCP URL of this edge: an OAuth access token issued
    /// for another resource is refused (RFC 8707 audience). `None` checks
    /// nothing (the console's sign-in, which admits only human keys).
    resource: Option<String>,
    /// External issuers' JWT access tokens, when `--oauth-issuer` is set.
    oauth: Option<Arc<crate::oauth::Verifier>>,
}

impl Authenticator {
    pub fn new(channel: Channel, key: InternalKey, ttl: Duration) -> Self {
        Authenticator {
            client: AuthServiceClient::with_interceptor(
                channel,
                Outbound::new(key, Principal::system("")),
            ),
            ttl: ttl.min(MAX_CACHE_TTL),
            timeout: crate::DEFAULT_BACKEND_TIMEOUT,
            cache: Mutex::new(HashMap::new()),
            failures: Arc::default(),
            oauth: None,
            resource: None,
        }
    }

    /// The same, refusing OAuth access tokens issued for any resource but
    /// `resource` (this edge's canonical `{public_url}/mcp`).
    pub fn with_resource(mut self, resource: impl Into<String>) -> Self {
        self.resource = Some(resource.into());
        self
    }

    /// Whether a verified credential's `resource` is acceptable here: an
    /// API key has none; a token must name this edge.
    fn resource_ok(&self, resource: &str) -> bool {
        match &self.resource {
            _ if resource.is_empty() => true,
            Some(ours) => ours.trim_end_matches('/') == resource.trim_end_matches('/'),
            None => true,
        }
    }

    /// The same, counting failed checks with `other`'s, so a client
    /// throttled at one door is throttled at the other's too.
    pub fn sharing_failures_with(mut self, other: &Authenticator) -> Self {
        self.failures = other.failures.clone();
        self
    }

    /// The same, with the deadline of each call to auth (zero keeps the
    /// default, [`crate::DEFAULT_BACKEND_TIMEOUT`]).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        if !timeout.is_zero() {
            self.timeout = timeout;
        }
        self
    }

    /// The rate limiter's shared counters, through the same auth service
    /// and with the same deadline.
    pub fn quota_store(&self) -> crate::limits::Store {
        crate::limits::Store::Shared {
            client: Box::new(self.client.clone()),
            timeout: self.timeout,
        }
    }

    /// Key checks refused by the throttle so far (`/metrics`).
    pub fn throttled(&self) -> u64 {
        self.failures.refused()
    }

    /// How often a long-lived request (the SSE trace stream) re-verifies
    /// its key: as often as a verified key may be cached, so revoking it
    /// ends the stream within the cache window plus one check.
    pub fn recheck_interval(&self) -> Duration {
        self.ttl.max(MIN_RECHECK)
    }

    /// The principal of an `Authorization` header value (`Bearer <token>`,
    /// or SkyPortal's `token <token>`).
    pub async fn authenticate(&self, header: Option<&str>) -> Result<Principal, AuthFailure> {
        let token = header.and_then(bearer_token).ok_or(AuthFailure::Missing)?;
        self.verify(token).await
    }

    /// [`Authenticator::check`] of an `Authorization` header value; a
    /// missing header is no check, and is not counted.
    pub async fn authenticate_from(
        &self,
        header: Option<&str>,
        client: Option<IpAddr>,
    ) -> Result<Principal, CheckFailure> {
        let token = header.and_then(bearer_token).ok_or(AuthFailure::Missing)?;
        self.check(token, client).await
    }

    /// Verify `token` presented by `client` at a door: refused at once when
    /// its key id or the address failed too often lately (auth is not
    /// asked), otherwise verified, and a failure counted. A token verified
    /// within the cache window is served from the cache, throttled or not,
    /// so a caller that is in keeps working.
    pub async fn check(
        &self,
        token: &str,
        client: Option<IpAddr>,
    ) -> Result<Principal, CheckFailure> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(principal) = self.cached(&digest) {
            return Ok(principal);
        }
        let key_id = crate::throttle::key_id_of(token);
        self.failures
            .admit(key_id, client)
            .map_err(CheckFailure::Throttled)?;
        match self.verify(token).await {
            Ok(principal) => {
                self.failures.succeeded(key_id);
                Ok(principal)
            }
            Err(failure @ (AuthFailure::Invalid | AuthFailure::Token(_))) => {
                self.failures.failed(key_id, client);
                tracing::debug!(key_id, client = ?client, "a key check failed");
                Err(failure.into())
            }
            Err(other) => Err(other.into()),
        }
    }

    /// Verify `token`, uncounted and never throttled: for re-checking a
    /// credential that was let in (an open stream, a console cookie).
    pub async fn verify(&self, token: &str) -> Result<Principal, AuthFailure> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(principal) = self.cached(&digest) {
            return Ok(principal);
        }
        if let Some(oauth) = &self.oauth
            && crate::oauth::looks_like_jwt(token)
        {
            return self.verify_jwt(oauth, token, digest).await;
        }
        let mut request = tonic::Request::new(pb::VerifyKeyRequest {
            token: token.to_owned(),
        });
        request.set_timeout(self.timeout);
        let mut client = self.client.clone();
        let reply = tokio::time::timeout(self.timeout, client.verify_key(request)).await;
        let verified = match reply {
            Ok(Ok(r)) => r.into_inner(),
            Ok(Err(status)) if status.code() == tonic::Code::Unauthenticated => {
                return Err(AuthFailure::Invalid);
            }
            Ok(Err(status)) => {
                return Err(AuthFailure::Unavailable(status.message().to_owned()));
            }
            Err(_) => {
                return Err(AuthFailure::Unavailable(format!(
                    "no answer within {} ms",
                    self.timeout.as_millis()
                )));
            }
        };
        if !self.resource_ok(&verified.resource) {
            return Err(AuthFailure::Invalid);
        }
        let principal = Principal::verified(VerifiedKey {
            human: verified.actor == pb::Actor::Human as i32,
            tenant_id: verified.tenant_id,
            key_id: verified.key_id,
            scopes: verified.scopes,
        });
        self.remember(digest, principal.clone());
        Ok(principal)
    }

    /// The same, also trusting JWT access tokens of `config`'s issuers
    /// (their keys start loading in the background now).
    pub fn with_oauth(
        mut self,
        config: crate::oauth::OAuthConfig,
    ) -> Result<Self, crate::oauth::ConfigError> {
        let tenants = crate::oauth::tenants::AuthTenants::new(self.client.clone(), self.timeout);
        let verifier = crate::oauth::Verifier::new(config, Arc::new(tenants))?;
        verifier.prefetch();
        self.oauth = Some(Arc::new(verifier));
        Ok(self)
    }

    /// The external issuers trusted (`--oauth-issuer`), for the resource
    /// metadata.
    pub fn oauth_issuers(&self) -> Vec<String> {
        self.oauth
            .as_ref()
            .map(|o| o.issuer_urls())
            .unwrap_or_default()
    }

    /// The verifier of external tokens, if any (tests read its issuers).
    pub fn oauth(&self) -> Option<&crate::oauth::Verifier> {
        self.oauth.as_deref()
    }

    /// Verify an external JWT access token, cached as a key is.
    async fn verify_jwt(
        &self,
        oauth: &crate::oauth::Verifier,
        token: &str,
        digest: [u8; 32],
    ) -> Result<Principal, AuthFailure> {
        match oauth.verify(token).await {
            Ok(principal) => {
                self.remember(digest, principal.clone());
                Ok(principal)
            }
            Err(crate::oauth::TokenFailure::Invalid(why)) => {
                tracing::info!(reason = %why, "an access token was refused");
                Err(AuthFailure::Token(why))
            }
            Err(crate::oauth::TokenFailure::Unavailable(why)) => Err(AuthFailure::Unavailable(why)),
        }
    }

    fn cached(&self, digest: &[u8; 32]) -> Option<Principal> {
        let cache = self.cache.lock().ok()?;
        let (at, principal) = cache.get(digest)?;
        (at.elapsed() < self.ttl).then(|| principal.clone())
    }

    fn remember(&self, digest: [u8; 32], principal: Principal) {
        let Ok(mut cache) = self.cache.lock() else {
            return;
        };
        if cache.len() >= SWEEP_AT {
            let ttl = self.ttl;
            cache.retain(|_, (at, _)| at.elapsed() < ttl);
        }
        cache.insert(digest, (Instant::now(), principal));
    }
}

/// The token of `Bearer <t>` (any case) or `token <t>`.
pub fn bearer_token(header: &str) -> Option<&str> {
    let (scheme, token) = header.trim().split_once(' ')?;
    let token = token.trim();
    let known = scheme.eq_ignore_ascii_case("bearer") || scheme.eq_ignore_ascii_case("token");
    (known && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::bearer_token;

    #[test]
    fn reads_bearer_and_token_schemes() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer  abc "), Some("abc"));
        assert_eq!(bearer_token("token abc"), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearer"), None);
        assert_eq!(bearer_token(""), None);
    }
}
