//! Who the caller is: a key or an access token becomes a [`Principal`], or
//! the request is answered 401 (with the challenge an OAuth client follows),
//! 429 (too many failed key checks) or 503 (auth unavailable).
//!
//! Second from the outside: the origin is settled first, so a foreign page
//! learns nothing from a 401; everything inside needs to know who calls.

// Refusals are finished HTTP responses; boxing them would only add noise.
#![allow(clippy::result_large_err)]

use super::answer::plain;
use super::options::HttpOptions;
use crate::auth::{AuthFailure, Authenticator, CheckFailure};
use crate::revoked::Revoked;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::future::BoxFuture;
use ithaca_kit::principal::Principal;
use serde_json::json;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

/// The realm of every bearer challenge (seed 000).
pub const REALM: &str = "doomberg-mcp";

/// Who callers are: verified keys, or one local principal when
/// authentication is off.
pub enum Callers {
    Keys(Box<Authenticator>),
    /// Authentication off; only allowed on loopback listeners.
    Local(Principal),
}

/// Who a browser is, from its cookies. The console signs people in and
/// answers here, so the trace stream can serve an `EventSource`, which
/// cannot send an `Authorization` header. Only the trace stream asks; `/mcp`
/// never does, so a cookie can never make an MCP call.
pub trait BrowserAuth: Send + Sync {
    /// The signed-in person, or `None` without a valid console session.
    fn principal<'a>(&'a self, headers: &'a HeaderMap) -> BoxFuture<'a, Option<Principal>>;
}

/// The caller of a request, as this layer leaves it in the request's
/// extensions for every layer inside.
#[derive(Clone, Debug)]
pub struct Caller {
    pub principal: Principal,
    /// Resolves once the caller's credential stops verifying: what ends
    /// its long-lived work (a listen, a legacy stream or subscription).
    pub revoked: Revoked,
}

/// The doors' keeper: how callers are recognised and what a refused one
/// is told.
pub struct Authn {
    callers: Callers,
    /// The public base URL, for the resource metadata's address.
    public_url: String,
    /// Console sign-ins, accepted by the trace stream only.
    browser: Option<Arc<dyn BrowserAuth>>,
}

/// The layer: the caller is recognised and left in the extensions as a
/// [`Caller`], or refused.
pub async fn layer(State(authn): State<Arc<Authn>>, mut request: Request, next: Next) -> Response {
    let client = client_of(request.extensions());
    let principal = match authn.authenticate(request.headers(), client).await {
        Ok(principal) => principal,
        Err(refused) => return refused,
    };
    let revoked = authn.revoked(request.headers());
    request
        .extensions_mut()
        .insert(Caller { principal, revoked });
    next.run(request).await
}

impl Authn {
    pub fn new(
        callers: Callers,
        options: &HttpOptions,
        browser: Option<Arc<dyn BrowserAuth>>,
    ) -> Self {
        Authn {
            callers,
            public_url: options.public_url.trim_end_matches('/').to_owned(),
            browser,
        }
    }

    pub fn callers(&self) -> &Callers {
        &self.callers
    }

    pub fn browser(&self) -> Option<&Arc<dyn BrowserAuth>> {
        self.browser.as_ref()
    }

    /// Whether callers carry scopes to check (keys do; a local caller,
    /// with authentication off, holds every scope).
    pub fn scoped(&self) -> bool {
        matches!(self.callers, Callers::Keys(_))
    }

    /// The caller of a request at a door, its key checked and a failure
    /// counted against its key id and `client` address (see `throttle.rs`).
    pub async fn authenticate(
        &self,
        headers: &HeaderMap,
        client: Option<IpAddr>,
    ) -> Result<Principal, Response> {
        match &self.callers {
            Callers::Local(p) => Ok(p.clone()),
            Callers::Keys(auth) => {
                let header = headers
                    .get(header::AUTHORIZATION)
                    .and_then(|h| h.to_str().ok());
                auth.authenticate_from(header, client)
                    .await
                    .map_err(|failure| match failure {
                        CheckFailure::Auth(failure) => self.unauthorized(&failure),
                        CheckFailure::Throttled(wait) => throttled(wait),
                    })
            }
        }
    }

    /// What ends the work of the caller a request was let in with: nothing
    /// for a local caller; for a key, its bearer no longer verifying.
    fn revoked(self: &Arc<Self>, headers: &HeaderMap) -> Revoked {
        if let Callers::Local(_) = self.callers {
            return Revoked::default();
        }
        // Only the key is checked again, so only its header is kept (a
        // copy of every header was about six allocations per request; most
        // requests never start long-lived work).
        let authn = self.clone();
        let key = headers.get(header::AUTHORIZATION).cloned();
        Revoked::new(move || {
            let mut headers = HeaderMap::new();
            if let Some(key) = &key {
                headers.insert(header::AUTHORIZATION, key.clone());
            }
            Box::pin(still_allowed(authn.clone(), false, headers))
        })
    }

    /// Whether the key a long-lived request was let in with still verifies
    /// (uncounted: it is the same credential, not a guess).
    async fn still_verifies(&self, headers: &HeaderMap) -> bool {
        match &self.callers {
            Callers::Local(_) => true,
            Callers::Keys(auth) => {
                let header = headers
                    .get(header::AUTHORIZATION)
                    .and_then(|h| h.to_str().ok());
                auth.authenticate(header).await.is_ok()
            }
        }
    }

    fn metadata_url(&self) -> String {
        format!("{}/.well-known/oauth-protected-resource", self.public_url)
    }

    fn unauthorized(&self, failure: &AuthFailure) -> Response {
        if let AuthFailure::Unavailable(why) = failure {
            tracing::warn!(error = %why, "authentication unavailable");
            // Retryable, and said so: the auth service (or its database)
            // is down for a moment, as during a restart.
            let mut response = plain(
                StatusCode::SERVICE_UNAVAILABLE,
                "authentication (ithaca.auth.v1.AuthService) is unavailable, retry later",
            );
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            return response;
        }
        let challenge = self.challenge(failure);
        let what_to_do = self.how_to_authenticate();
        let mut response = (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({
                "error": "invalid_token",
                "error_description": format!("{failure}: {what_to_do}"),
            })),
        )
            .into_response();
        if let Ok(v) = HeaderValue::from_str(&challenge) {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, v);
        }
        response
    }

    /// What a 401 tells the caller to do.
    fn how_to_authenticate(&self) -> &'static str {
        if self.authorization_servers().is_empty() {
            "send `Authorization: Bearer dmbg_<env>_<keyid>_<secret>`; an administrator issues \
             keys with `ithaca keys create` (this server names no OAuth authorization server)"
        } else {
            "send `Authorization: Bearer <key or OAuth access token>`: an API key \
             (`ithaca keys create`), or a token for this resource from an authorization server \
             in the resource metadata (a person consents)"
        }
    }

    /// The `WWW-Authenticate` of a 401 (RFC 6750 §3, RFC 9728 §5.1): where
    /// the resource metadata is, the scope every request needs (so an OAuth
    /// client asks for at least that), and `invalid_token` when a
    /// credential was presented and refused (none for a missing one).
    fn challenge(&self, failure: &AuthFailure) -> String {
        let error = match failure {
            AuthFailure::Missing => String::new(),
            _ => ", error=\"invalid_token\"".to_owned(),
        };
        format!(
            "Bearer realm=\"{REALM}\", resource_metadata=\"{}\", scope=\"{}\"{error}",
            self.metadata_url(),
            crate::catalog::BASE_SCOPE,
        )
    }

    /// The 403 of a request whose caller lacks `missing`: the challenge
    /// names every scope the operation `needs` (MCP 2025-11-25), so a
    /// client stepping up asks for all of them at once.
    pub fn missing_scope(&self, needs: &[String], missing: &str) -> Response {
        let challenge = format!(
            "Bearer realm=\"{REALM}\", error=\"insufficient_scope\", scope=\"{}\", resource_metadata=\"{}\"",
            needs.join(" "),
            self.metadata_url()
        );
        let mut response = plain(StatusCode::FORBIDDEN, format!("missing scope: {missing}"));
        if let Ok(v) = HeaderValue::from_str(&challenge) {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, v);
        }
        response
    }

    /// The authorization servers this edge trusts: its built-in one (the same
    /// origin) when the console that serves it is mounted, which is whenever
    /// keys are checked, and the external issuers configured with
    /// `--oauth-issuer`. With none, none is named: naming one that serves no
    /// metadata would send OAuth-capable hosts looking in vain.
    pub fn authorization_servers(&self) -> Vec<String> {
        let mut servers = Vec::new();
        if self.browser.is_some() {
            servers.push(self.public_url.clone());
        }
        if let Callers::Keys(auth) = &self.callers {
            for issuer in auth.oauth_issuers() {
                if !servers.contains(&issuer) {
                    servers.push(issuer);
                }
            }
        }
        servers
    }
}

/// Resolves once the caller of a long-lived request (a trace stream, a
/// legacy GET stream, a listen, a legacy subscription) is no longer
/// allowed in: its bearer key (or, when `signed_in`, its console sign-in)
/// no longer verifies. Never resolves for a local caller (authentication
/// off).
pub async fn still_allowed(authn: Arc<Authn>, signed_in: bool, headers: HeaderMap) {
    let every = match (&authn.callers, signed_in) {
        (_, true) => crate::auth::MAX_CACHE_TTL,
        (Callers::Keys(auth), false) => auth.recheck_interval(),
        (Callers::Local(_), false) => return std::future::pending().await,
    };
    loop {
        tokio::time::sleep(every).await;
        let allowed = if signed_in {
            match &authn.browser {
                Some(browser) => browser.principal(&headers).await.is_some(),
                None => false,
            }
        } else {
            authn.still_verifies(&headers).await
        };
        if !allowed {
            tracing::info!("a long-lived request ended: its caller no longer verifies");
            return;
        }
    }
}

/// The `429` of a door throttled for failed key checks (`throttle.rs`).
fn throttled(wait: Duration) -> Response {
    let secs = wait.as_secs().max(1);
    let mut response = plain(
        StatusCode::TOO_MANY_REQUESTS,
        format!(
            "too many failed key checks for this key id or from this address; \
             retry after {secs} s"
        ),
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    response
}

/// The client's address, as the listener recorded it (none when served
/// without connect info, as some tests are).
pub fn client_of(extensions: &http::Extensions) -> Option<IpAddr> {
    extensions
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
        .map(|info| info.0.ip())
}
