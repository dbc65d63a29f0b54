//! The web console: where people watch, replay, close and start research
//! sessions, decide approvals, read runs and manage keys.
//!
//! Served under `/console` by the edge's HTTP front (the binary merges
//! [`router`] beside the edge's own), rendered on the server with `askama`
//! templates that the compiler checks, plus one small plain script
//! (`assets/console.js`: the live trace over `EventSource`, local times, copy
//! buttons). There is no build step and nothing to install.
//!
//! - [`cookie`]: the sealed sign-in cookie and CSRF tokens.
//! - [`gate`]: sign-in, sign-out, who a request is (the [`gate::Person`] and
//!   [`gate::Change`] extractors), Host/Origin and CSRF checks.
//! - [`pages`]: one module per area (sessions, approvals, runs, filters,
//!   GCN events, objects, keys).
//! - [`signins`]: the sign-in records the auth service keeps for the
//!   console, opened at sign-in, checked on every request, ended at
//!   sign-out or when the key is revoked.
//! - [`backends`]: the signed gRPC calls every page makes.
//! - [`oauth`]: the built-in OAuth 2.1 authorization server's endpoints
//!   (metadata, `/authorize` with the consent page, `/token`, `/register`,
//!   `/revoke`) beside `/console`; the Connected apps page is
//!   `pages::apps`.
//!
//! Architecture invariant: like the edge, the console owns no durable state.
//! Everything it shows or does is one gRPC call to the owning service, made
//! with the signed-in person's own principal, so each service's tenant and
//! actor checks apply exactly as for an MCP call. Sign-ins are records of
//! the auth service, not of the console. It depends on the edge only for
//! checking a key at sign-in ([`ithaca_edge::auth::Authenticator`]); the
//! edge's MCP path knows nothing of it.

#![forbid(unsafe_code)]
// Refusals are finished HTTP responses; boxing them would only add noise.
#![allow(clippy::result_large_err)]

pub mod backends;
pub mod cookie;
pub mod gate;
pub mod oauth;
pub mod pages;
pub mod signins;
pub mod view;

use axum::Router;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use backends::Backends;
use futures::future::BoxFuture;
use ithaca_edge::auth::Authenticator;
use ithaca_kit::principal::{InternalKey, Principal};
use std::sync::Arc;
use std::time::Duration;

/// How long a sign-in lasts before the person signs in again.
pub const SIGN_IN_TTL: Duration = Duration::from_secs(8 * 3600);

/// Rows on one page of every list.
pub const PAGE_SIZE: usize = 25;

/// What the console needs to run.
pub struct Config {
    /// Signs principals and derives the cookie keys.
    pub key: InternalKey,
    /// Verifies the key a person signs in with (later requests check the
    /// key and the sign-in together, uncached: [`signins`]).
    pub authenticator: Authenticator,
    /// The services' gRPC channels.
    pub backends: Backends,
    /// The edge's public base URL: its host is accepted besides loopback,
    /// and `https` makes the cookie `Secure`.
    pub public_url: String,
    /// Fetch client metadata documents from private and loopback addresses
    /// over plain HTTP too: for tests only.
    pub oauth_allow_private_metadata: bool,
    /// DER certificates trusted beside Mozilla's roots when fetching those
    /// documents over https; taken only with `oauth_allow_private_metadata`
    /// (a test's own certificate).
    pub oauth_metadata_test_roots: Vec<Vec<u8>>,
}

/// The console: shared by every request.
pub struct Console {
    key: InternalKey,
    sealer: cookie::Sealer,
    authenticator: Authenticator,
    backends: Backends,
    public_url: String,
    /// `host[:port]` of the public URL, for the DNS-rebinding check.
    public_host: String,
    secure_cookie: bool,
    /// The authorization server's metadata fetcher and registration limit.
    oauth: oauth::State,
}

impl Console {
    pub fn new(config: Config) -> Arc<Console> {
        let public_host = ithaca_edge::front::host_of(&config.public_url).unwrap_or_default();
        Arc::new(Console {
            sealer: cookie::Sealer::new(&config.key),
            key: config.key,
            authenticator: config.authenticator,
            backends: config.backends,
            secure_cookie: config.public_url.starts_with("https://"),
            public_url: config.public_url,
            public_host,
            oauth: oauth::State::new(
                config.oauth_allow_private_metadata,
                config.oauth_metadata_test_roots,
            ),
        })
    }

    /// The edge's public base URL, without a trailing slash.
    pub fn public_url(&self) -> &str {
        self.public_url.trim_end_matches('/')
    }
}

/// The trace stream accepts console sign-ins, so a page's `EventSource`
/// needs no key in the browser.
impl ithaca_edge::front::BrowserAuth for Console {
    fn principal<'a>(&'a self, headers: &'a HeaderMap) -> BoxFuture<'a, Option<Principal>> {
        Box::pin(async move { self.person(headers).await.ok().map(|p| p.principal) })
    }
}

/// The console's routes, all under `/console`.
pub fn router(console: Arc<Console>) -> Router {
    use pages::{approvals, apps, filters, gcn, keys, objects, runs, sessions};
    let routes = Router::new()
        .route("/", get(gate::home))
        .route("/sign-in", get(gate::sign_in_page).post(gate::sign_in))
        .route("/sign-out", post(gate::sign_out))
        .route("/assets/console.css", get(asset_css))
        .route("/assets/console.js", get(asset_js))
        .route("/sessions", get(sessions::list).post(sessions::start))
        .route("/sessions/{id}", get(sessions::show))
        .route("/sessions/{id}/close", post(sessions::close))
        .route("/approvals", get(approvals::inbox))
        .route("/approvals/{id}", get(approvals::show))
        .route("/approvals/{id}/decide", post(approvals::decide))
        .route("/runs", get(runs::find))
        .route("/runs/{id}", get(runs::show))
        .route("/runs/{id}/artifacts/{artifact}", get(runs::artifact))
        .route("/filters", get(filters::list))
        .route("/filters/{id}", get(filters::show))
        .route("/gcn", get(gcn::list))
        .route("/gcn/{dateobs}", get(gcn::show))
        .route("/objects/{object_id}", get(objects::show))
        .route(
            "/objects/{object_id}/lightcurve.svg",
            get(objects::light_curve),
        )
        .route("/alerts/{candid}/cutouts/{file}", get(objects::cutout))
        .route("/keys", get(keys::list).post(keys::create))
        .route("/keys/{id}/revoke", post(keys::revoke))
        .route("/apps", get(apps::list))
        .route("/apps/{id}/revoke", post(apps::revoke))
        .fallback(pages::not_found)
        .with_state(console.clone());
    Router::new()
        .merge(oauth::router(console))
        .route("/console/", get(|| async { Redirect::to("/console") }))
        .nest("/console", routes)
        .layer(axum::middleware::map_response(security_headers))
}

/// Headers every console response carries: a strict Content Security
/// Policy (scripts and styles only from the console's own assets), no
/// framing, no sniffing, no caching of pages that show tenant data.
async fn security_headers(mut response: Response) -> Response {
    let h = response.headers_mut();
    if !h.contains_key(header::CONTENT_SECURITY_POLICY) {
        h.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(
                "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                 connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
            ),
        );
    }
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

const CSS: &str = include_str!("../assets/console.css");
const JS: &str = include_str!("../assets/console.js");

async fn asset_css() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=300"),
        ],
        CSS,
    )
        .into_response()
}

async fn asset_js() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=300"),
        ],
        JS,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn routes_build_without_overlaps() {
        let key = InternalKey::new(vec![7; 32]).expect("32 bytes");
        let channel = ithaca_kit::client::channel("http://127.0.0.1:1").expect("url");
        let console = Console::new(Config {
            authenticator: Authenticator::new(channel.clone(), key.clone(), Duration::ZERO),
            key,
            backends: Backends {
                auth: channel,
                session: None,
                approvals: None,
                skills: None,
                broker: None,
                timeout: Duration::from_secs(1),
            },
            public_url: "http://127.0.0.1:8080".to_owned(),
            oauth_allow_private_metadata: false,
            oauth_metadata_test_roots: Vec::new(),
        });
        let _ = router(console);
    }
}
