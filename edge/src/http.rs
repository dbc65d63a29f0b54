//! The HTTP face of the edge: `/mcp` and everything served beside it.
//!
//! A request to `/mcp` passes, in this order: the Host/Origin check (DNS
//! rebinding), authentication, the body limit and JSON checks (parse errors
//! are answered here, since `rmcp` would answer them with a bare 415, and a
//! 2025-03-26 batch is split here into its members: `batch.rs`),
//! the scope check decided from the JSON-RPC body, and finally the `rmcp`
//! Streamable HTTP service inside the request's MCP server span.
//!
//! The trace stream (`/api/sessions/{id}/events/stream`) also accepts a
//! person signed in to the console, through [`BrowserAuth`]; `/mcp` never
//! does, so a cookie cannot make an MCP call.

// Refusals are finished HTTP responses; boxing them would only add noise.
#![allow(clippy::result_large_err)]

use crate::auth::{AuthFailure, Authenticator, CheckFailure};
use crate::catalog::Catalog;
use crate::core::Core;
use crate::mcp::{CallerInfo, Gateway};
use crate::metrics::Metrics;
use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use futures::StreamExt;
use futures::future::BoxFuture;
use ithaca_kit::principal::Principal;
use ithaca_proto::session::v1 as spb;
use opentelemetry::propagation::Extractor;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tower::ServiceExt;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The realm of every bearer challenge (seed 000).
pub const REALM: &str = "doomberg-mcp";

/// How the HTTP edge behaves.
#[derive(Clone, Debug)]
pub struct HttpOptions {
    /// The public base URL (scheme://host[:port]); its host is accepted in
    /// `Host` and `Origin` besides loopback.
    pub public_url: String,
    /// Largest request body.
    pub body_limit: usize,
    /// Longest a request may take to produce its response head (a tool with
    /// a longer deadline of its own gets that plus a margin).
    pub request_timeout: Duration,
    /// Browser origins (`https://console.example`) allowed to call the edge
    /// cross-origin. Empty: CORS is off and preflights are refused.
    pub cors_origins: Vec<String>,
    /// Rate limits and quotas per key and per tenant (none by default).
    pub rate_limits: crate::limits::RateLimits,
    /// This replica's URL for the other edge replicas (`http://10.0.0.5:8080`),
    /// when there are several behind a balancer without affinity: a legacy
    /// client's answer to a request made during a call may reach another
    /// replica, which forwards it here (see `relay.rs`). `None`: answers
    /// are taken only where they land.
    pub advertise_url: Option<String>,
}

/// The defaults `ithaca up`, `ithaca serve edge` and tests share.
impl HttpOptions {
    pub const DEFAULT_PUBLIC_URL: &str = "http://127.0.0.1:8080";
    pub const DEFAULT_BODY_LIMIT: usize = 1024 * 1024;
    pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            public_url: Self::DEFAULT_PUBLIC_URL.to_owned(),
            body_limit: Self::DEFAULT_BODY_LIMIT,
            request_timeout: Self::DEFAULT_REQUEST_TIMEOUT,
            cors_origins: Vec::new(),
            rate_limits: crate::limits::RateLimits::default(),
            advertise_url: None,
        }
    }
}

/// The named JSON-RPC error codes (one list, in `core`).
pub use crate::core::codes;

/// The requests a 2026-07-28 client may send (its schema's `ClientRequest`).
const MODERN_METHODS: &[&str] = &[
    "server/discover",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "subscriptions/listen",
];

/// The requests of the `initialize` profile (2024-11-05 to 2025-11-25).
const LEGACY_METHODS: &[&str] = &[
    "initialize",
    "ping",
    "server/discover",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
];

/// Who a browser is, from its cookies. The console signs people in and
/// answers here, so the trace stream can serve an `EventSource`, which
/// cannot send an `Authorization` header. Only the trace stream asks; `/mcp`
/// never does, so a cookie can never make an MCP call.
pub trait BrowserAuth: Send + Sync {
    /// The signed-in person, or `None` without a valid console session.
    fn principal<'a>(&'a self, headers: &'a HeaderMap) -> BoxFuture<'a, Option<Principal>>;
}

/// Whether `host` (a `Host` header or an origin's host, any port) names
/// loopback or the host of `public_host`: the DNS-rebinding rule that the
/// console shares.
pub fn host_allowed(public_host: &str, host: &str) -> bool {
    let host = host.to_ascii_lowercase();
    let name = hostname(&host);
    // DNS rebinding is about the name a browser resolved; any port of an
    // allowed name is fine.
    matches!(name, "localhost" | "127.0.0.1" | "[::1]")
        || (!public_host.is_empty() && name == hostname(public_host))
}

/// `host[:port]` of a URL, lowercased.
pub fn host_of(url: &str) -> Option<String> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let host = rest.split('/').next()?;
    (!host.is_empty()).then(|| host.to_ascii_lowercase())
}

/// Who callers are: verified keys, or one local principal when
/// authentication is off.
pub enum Callers {
    Keys(Box<Authenticator>),
    /// Authentication off; only allowed on loopback listeners.
    Local(Principal),
}

struct Edge {
    core: Arc<Core>,
    callers: Callers,
    options: HttpOptions,
    metrics: Metrics,
    mcp: StreamableHttpService<Gateway, NeverSessionManager>,
    /// Where a legacy client's answer to a request made during a call goes
    /// (`relay`): rmcp refuses responses on a stateless server.
    asks: Arc<crate::relay::Asks>,
    /// Legacy resource subscriptions; their updates go out on the
    /// caller's GET streams (`legacy_stream`).
    subscriptions: Arc<crate::subscribe::Subscriptions>,
    /// `host[:port]` of the public URL, lowercased.
    public_host: String,
    /// Console sign-ins, accepted by the trace stream only.
    browser: Option<Arc<dyn BrowserAuth>>,
    /// Carries a legacy answer to the replica holding its call.
    forwarder: hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        http_body_util::Full<bytes::Bytes>,
    >,
    /// Rate limits and quotas, checked once the caller is known.
    limiter: crate::limits::Limiter,
}

/// The edge's axum router.
pub fn router(core: Arc<Core>, callers: Callers, options: HttpOptions) -> Router {
    router_with(core, callers, options, None)
}

/// The edge's axum router, whose trace stream also accepts the people that
/// `browser` recognises (the console's sign-ins).
pub fn router_with(
    core: Arc<Core>,
    callers: Callers,
    options: HttpOptions,
    browser: Option<Arc<dyn BrowserAuth>>,
) -> Router {
    let asks = Arc::new(crate::relay::Asks::new(
        core.derive_key(crate::relay::ASK_KEY_PURPOSE),
        options.advertise_url.clone(),
    ));
    let gateway = Gateway::http(core.clone()).with_asks(asks.clone());
    let subscriptions = gateway.subscriptions();
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        // Host and Origin are checked before authentication, below.
        .disable_allowed_hosts()
        .with_max_request_body_bytes(options.body_limit);
    let mcp = StreamableHttpService::new(
        move || Ok(gateway.clone()),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    let public_host = host_of(&options.public_url).unwrap_or_default();
    // Keys share their counters through the auth service that verifies
    // them; a local caller's are kept here.
    let store = match &callers {
        Callers::Keys(auth) => auth.quota_store(),
        Callers::Local(_) => crate::limits::Store::local(),
    };
    let limiter = crate::limits::Limiter::new(options.rate_limits.clone(), store);
    let edge = Arc::new(Edge {
        core,
        callers,
        options,
        metrics: Metrics::default(),
        mcp,
        asks,
        subscriptions,
        public_host,
        browser,
        limiter,
        forwarder:
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http(),
    });
    Router::new()
        .route("/mcp", any(mcp_entry))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route(
            "/.well-known/oauth-protected-resource",
            get(resource_metadata),
        )
        .route(
            "/.well-known/oauth-protected-resource/mcp",
            get(resource_metadata),
        )
        .route("/api/sessions/{id}/events/stream", get(trace_stream))
        .with_state(edge)
}

/// The host name without a port (IPv6 literals keep their brackets).
fn hostname(host: &str) -> &str {
    if host.starts_with('[') {
        return host
            .split_once(']')
            .map_or(host, |(h, _)| &host[..=h.len()]);
    }
    host.rsplit_once(':').map_or(host, |(h, _)| h)
}

impl Edge {
    fn host_allowed(&self, host: &str) -> bool {
        host_allowed(&self.public_host, host)
    }

    /// Whether `origin` (as the browser sent it) may call cross-origin.
    fn cors_allowed(&self, origin: &str) -> bool {
        let origin = origin.trim_end_matches('/');
        self.options
            .cors_origins
            .iter()
            .any(|o| o == "*" || o.trim_end_matches('/').eq_ignore_ascii_case(origin))
    }

    /// DNS-rebinding defence: a foreign `Host`, or an `Origin` that is not
    /// this server nor an allowed CORS origin, is refused. This server is
    /// the `Host` the request names or the public URL, port and all, as
    /// the console's POSTs check: another port of loopback is another
    /// origin (any local web page), not this edge.
    fn check_origin(&self, headers: &HeaderMap) -> Result<(), Response> {
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("");
        if !self.host_allowed(host) {
            return Err(plain(
                StatusCode::FORBIDDEN,
                format!("host not allowed: {host}"),
            ));
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let host = host.to_ascii_lowercase();
            let ok = origin.to_str().ok().is_some_and(|o| {
                self.cors_allowed(o)
                    || host_of(o).is_some_and(|h| h == host || h == self.public_host)
            });
            if !ok {
                return Err(plain(StatusCode::FORBIDDEN, "origin not allowed"));
            }
        }
        Ok(())
    }

    /// The caller of a request at a door, its key checked and a failure
    /// counted against its key id and `client` address (see `throttle.rs`).
    async fn authenticate(
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
        format!(
            "{}/.well-known/oauth-protected-resource",
            self.options.public_url.trim_end_matches('/')
        )
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
                .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
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
        if authorization_servers(self).is_empty() {
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
    fn missing_scope(&self, needs: &[String], missing: &str) -> Response {
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

    /// Log and count a handshake with the client's own name and version:
    /// `initialize` (the legacy profile) or `server/discover` (2026-07-28).
    fn count_handshake(&self, message: &Value) {
        let params = &message["params"];
        let (era, info) = match message["method"].as_str() {
            Some("initialize") => ("legacy", &params["clientInfo"]),
            Some("server/discover") => (
                "2026-07-28",
                &params["_meta"]["io.modelcontextprotocol/clientInfo"],
            ),
            _ => return,
        };
        let name = info["name"].as_str().unwrap_or("");
        let version = info["version"].as_str().unwrap_or("");
        let requested = params["protocolVersion"].as_str().unwrap_or("");
        tracing::info!(
            era,
            client_name = name,
            client_version = version,
            requested,
            "mcp handshake"
        );
        self.metrics.handshake(era, name, version);
    }

    /// How long a request may take: the HTTP default, or longer for a tool
    /// whose own deadline is longer (a long poll), plus a margin so the
    /// tool's own timeout answers first.
    fn request_timeout(&self, message: &Value) -> Duration {
        let tool_deadline = (message["method"] == "tools/call")
            .then(|| message["params"]["name"].as_str())
            .flatten()
            .and_then(|name| self.core.catalog.tool(name))
            .and_then(crate::catalog::Tool::deadline);
        match tool_deadline {
            Some(d) => self.options.request_timeout.max(d + Duration::from_secs(5)),
            None => self.options.request_timeout,
        }
    }

    /// Answer a CORS preflight: allowed origins get the methods and headers
    /// MCP uses; anything else is refused (CORS is off unless configured).
    fn preflight(&self, headers: &HeaderMap) -> Response {
        let origin = headers.get(header::ORIGIN).and_then(|o| o.to_str().ok());
        let Some(origin) = origin.filter(|o| self.cors_allowed(o)) else {
            return plain(
                StatusCode::FORBIDDEN,
                "cross-origin requests are not allowed from this origin; an operator allows \
                 origins with --cors-origin",
            );
        };
        let mut response = StatusCode::NO_CONTENT.into_response();
        let h = response.headers_mut();
        if let Ok(v) = HeaderValue::from_str(origin) {
            h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, v);
        }
        h.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("GET, POST, OPTIONS"),
        );
        h.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static(
                "authorization, content-type, accept, mcp-protocol-version, mcp-method, mcp-name, last-event-id",
            ),
        );
        h.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static("600"),
        );
        h.insert(header::VARY, HeaderValue::from_static("Origin"));
        response
    }

    /// Mark a response readable by an allowed cross-origin caller.
    fn with_cors(&self, origin: Option<&HeaderValue>, mut response: Response) -> Response {
        let Some(origin) = origin.filter(|o| o.to_str().is_ok_and(|o| self.cors_allowed(o))) else {
            return response;
        };
        let h = response.headers_mut();
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
        h.insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static("www-authenticate"),
        );
        h.append(header::VARY, HeaderValue::from_static("Origin"));
        response
    }
}

/// What the request front decided about one POST body, before the
/// caller's scopes are compared with what it needs.
pub enum Screened {
    /// A finished refusal: not JSON, not one well-formed JSON-RPC message,
    /// an unsupported protocol version, a method unknown in its era, or
    /// params without what the method needs.
    Refused(Response),
    /// A batch: served member by member where the request's revision
    /// allows batches (2025-03-26 and older), refused elsewhere; in both
    /// cases after the caller is found to hold the union of its members'
    /// scopes (seed 000).
    Batch {
        scopes: Vec<String>,
        members: Vec<Value>,
    },
    /// One message to serve.
    Message {
        message: Value,
        /// The scopes it needs.
        scopes: Vec<String>,
        /// Its `method` label in the metrics (a known method or `other`).
        method: String,
    },
}

/// The request front's checks that need nothing but the request and the
/// catalog, in the order the edge applies them. Pure, so the
/// `request_front` fuzz target drives it with arbitrary bodies and headers.
pub fn screen(catalog: &Catalog, headers: &HeaderMap, body: &[u8]) -> Screened {
    // serde_json refuses nesting deeper than 128 levels, so deeply nested
    // input is a parse error, not a deep recursion.
    let message: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(error) => {
            let text = if error.to_string().starts_with("recursion limit exceeded") {
                format!(
                    "Parse error: the body nests deeper than 128 levels, more than this server \
                     reads (tool arguments may nest at most {} levels)",
                    crate::transcode::MAX_NESTING
                )
            } else {
                "Parse error: the body is not valid JSON".to_owned()
            };
            return Screened::Refused(jsonrpc_error(
                StatusCode::BAD_REQUEST,
                Value::Null,
                codes::PARSE_ERROR,
                &text,
            ));
        }
    };
    if let Value::Array(members) = message {
        let mut scopes: Vec<String> = Vec::new();
        for member in &members {
            for scope in required_scopes(catalog, member) {
                if !scopes.contains(&scope) {
                    scopes.push(scope);
                }
            }
        }
        return Screened::Batch { scopes, members };
    }
    if let Err(refused) = check_envelope(&message) {
        return Screened::Refused(refused);
    }
    if let Err(refused) = check_request(&message, headers) {
        return Screened::Refused(refused);
    }
    Screened::Message {
        scopes: required_scopes(catalog, &message),
        method: metric_method(&message),
        message,
    }
}

/// The scopes one JSON-RPC message needs (seed 000's table plus each
/// tool's and resource's own scope).
fn required_scopes(catalog: &Catalog, message: &Value) -> Vec<String> {
    let params = &message["params"];
    let scopes: Vec<&str> = match message["method"].as_str().unwrap_or("") {
        "tools/call" => match params["name"].as_str().and_then(|n| catalog.tool(n)) {
            Some(tool) => tool.scopes(),
            None => vec![crate::catalog::BASE_SCOPE],
        },
        // Subscribing is checked as reading is.
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
            match params["uri"].as_str().and_then(|u| catalog.resource(u)) {
                Some((resource, _)) => resource.scopes(),
                None => vec![crate::catalog::BASE_SCOPE],
            }
        }
        "resources/list" | "resources/templates/list" => vec![crate::catalog::BASE_SCOPE],
        _ => Vec::new(),
    };
    scopes.into_iter().map(str::to_owned).collect()
}

/// Why a request body could not be read: too slow (the listener's body
/// timeout, 408, and the connection is closed), too large (413), or broken
/// off (400).
fn body_refused(error: &axum::Error, limit: usize) -> Response {
    if crate::listener::is_body_timeout(error) {
        let mut response = plain(StatusCode::REQUEST_TIMEOUT, error.to_string());
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        return response;
    }
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = cause {
        if e.is::<http_body_util::LengthLimitError>() {
            return plain(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("request body larger than {limit} bytes"),
            );
        }
        cause = e.source();
    }
    plain(
        StatusCode::BAD_REQUEST,
        format!("the request body could not be read: {error}"),
    )
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
fn client_of(extensions: &http::Extensions) -> Option<IpAddr> {
    extensions
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
        .map(|info| info.0.ip())
}

fn plain(status: StatusCode, text: impl Into<String>) -> Response {
    let mut text = text.into();
    text.push('\n');
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        text,
    )
        .into_response()
}

fn jsonrpc_error(status: StatusCode, id: Value, code: i32, message: &str) -> Response {
    jsonrpc_error_with(status, id, code, message, None)
}

fn jsonrpc_error_with(
    status: StatusCode,
    id: Value,
    code: i32,
    message: &str,
    data: Option<Value>,
) -> Response {
    let mut error = json!({"code": code, "message": message});
    if let Some(data) = data {
        error["data"] = data;
    }
    let body = json!({"jsonrpc": "2.0", "id": id, "error": error});
    (status, axum::Json(body)).into_response()
}

/// Per-request protocol checks made before rmcp sees the request: the
/// `MCP-Protocol-Version` header names a served revision (in both eras), the
/// method exists in the request's era, and its params have what it needs.
fn check_request(message: &Value, headers: &HeaderMap) -> Result<(), Response> {
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    if let Some(header) = headers.get("mcp-protocol-version") {
        let version = header.to_str().unwrap_or("");
        if !crate::mcp::VERSIONS.iter().any(|v| v.as_str() == version) {
            // A 2026-07-28 request is told the revisions `server/discover`
            // advertises (the suite checks the one list is within the
            // other); a legacy request every revision served.
            let supported: Vec<String> = if is_modern(message) {
                crate::mcp::modern_versions()
            } else {
                crate::mcp::VERSIONS.iter().map(|v| v.to_string()).collect()
            };
            return Err(jsonrpc_error_with(
                StatusCode::BAD_REQUEST,
                id,
                codes::UNSUPPORTED_PROTOCOL_VERSION,
                &format!(
                    "Unsupported protocol version in MCP-Protocol-Version: {version:?}; this server speaks {}",
                    supported.join(", ")
                ),
                Some(json!({"supported": supported, "requested": version})),
            ));
        }
    }
    let Some(method) = message["method"].as_str() else {
        return Ok(());
    };
    if method.starts_with("notifications/") || message.get("id").is_none() {
        return Ok(());
    }
    if method == "initialize"
        && message["params"]["protocolVersion"].as_str() >= Some(crate::mcp::NO_INITIALIZE_FROM)
    {
        // 2026-07-28 has no handshake: its clients call server/discover.
        return Err(jsonrpc_error_with(
            StatusCode::OK,
            id,
            codes::METHOD_NOT_FOUND,
            "Method not found: initialize is not a request of protocol 2026-07-28 and later; \
             send server/discover and put the version in each request's _meta",
            Some(json!({"method": method})),
        ));
    }
    let modern = is_modern(message);
    let known = if modern {
        MODERN_METHODS
    } else {
        LEGACY_METHODS
    };
    if !known.contains(&method) {
        let era = if modern {
            "protocol 2026-07-28"
        } else {
            "the initialize profile"
        };
        let mut text = format!("Method not found: {method:?} is not a request of {era}");
        if modern && LEGACY_METHODS.contains(&method) {
            text.push_str(" (it was removed in 2026-07-28)");
        }
        text.push_str(&format!("; the requests are: {}", known.join(", ")));
        // The 2026-07-28 transport answers an unknown method with 404.
        let status = if modern {
            StatusCode::NOT_FOUND
        } else {
            StatusCode::OK
        };
        return Err(jsonrpc_error_with(
            status,
            id,
            codes::METHOD_NOT_FOUND,
            &text,
            Some(json!({"method": method})),
        ));
    }
    if let Err(what) = check_params(method, &message["params"]) {
        return Err(jsonrpc_error(
            StatusCode::OK,
            id,
            codes::INVALID_PARAMS,
            &format!("Invalid params: {what}"),
        ));
    }
    Ok(())
}

/// The `method` label of a request's metrics: a known method, or `other`
/// (a client must not mint label values), `response` for a reply.
fn metric_method(message: &Value) -> String {
    let Some(method) = message["method"].as_str() else {
        return "response".to_owned();
    };
    let known = MODERN_METHODS.contains(&method)
        || LEGACY_METHODS.contains(&method)
        || KNOWN_NOTIFICATIONS.contains(&method);
    if known { method } else { "other" }.to_owned()
}

/// Notifications a client may send (the label set of their metrics).
const KNOWN_NOTIFICATIONS: &[&str] = &[
    "notifications/initialized",
    "notifications/cancelled",
    "notifications/progress",
    "notifications/roots/list_changed",
];

/// Whether a request declares the 2026-07-28 era in its own `_meta`.
fn is_modern(message: &Value) -> bool {
    message["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"].is_string()
}

/// The JSON-RPC envelope's shape: `id` a string or a number, `method` a
/// string, `params` an object. A wrong type is an invalid request (400),
/// decided here because rmcp would answer it with a bare 415.
fn check_envelope(message: &Value) -> Result<(), Response> {
    let refuse = |what: &str| {
        Err(jsonrpc_error(
            StatusCode::BAD_REQUEST,
            Value::Null,
            codes::INVALID_REQUEST,
            &format!("Invalid Request: {what}"),
        ))
    };
    if !message.is_object() || message.get("jsonrpc") != Some(&json!("2.0")) {
        return refuse("expected one JSON-RPC 2.0 message object");
    }
    match message.get("id") {
        None | Some(Value::String(_) | Value::Number(_)) => {}
        Some(_) => return refuse("`id` must be a string or a number"),
    }
    match message.get("method") {
        Some(Value::String(_)) => {}
        Some(_) => return refuse("`method` must be a string"),
        // A response to a server request: needs an id and a result or error.
        None if message.get("id").is_some()
            && (message.get("result").is_some() || message.get("error").is_some()) => {}
        None => return refuse("`method` is missing"),
    }
    match message.get("params") {
        None | Some(Value::Object(_)) => Ok(()),
        Some(_) => refuse("`params` must be an object"),
    }
}

/// What a request needs in `params`, checked before dispatch so a missing
/// or mistyped field is named (`-32602`) instead of looking like an unknown
/// method.
fn check_params(method: &str, params: &Value) -> Result<(), String> {
    let string = |field: &str| -> Result<(), String> {
        match params.get(field) {
            Some(Value::String(_)) => Ok(()),
            Some(_) => Err(format!("params.{field} must be a string")),
            None => Err(format!("{method} needs params.{field} (a string)")),
        }
    };
    match method {
        "tools/call" => {
            string("name")?;
            match params.get("arguments") {
                None | Some(Value::Null | Value::Object(_)) => Ok(()),
                Some(_) => Err("params.arguments must be an object".to_owned()),
            }
        }
        "prompts/get" => string("name"),
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => string("uri"),
        _ => Ok(()),
    }
}

struct MetaExtractor<'a>(&'a serde_json::Map<String, Value>);

impl Extractor for MetaExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(Value::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

/// The MCP server span of one request (DESIGN §7): named
/// `{mcp.method.name} {target}`, a child of `_meta.traceparent` when the
/// request carries one, else of the HTTP `traceparent`.
fn request_span(message: &Value, headers: &HeaderMap) -> tracing::Span {
    let method = message["method"].as_str().unwrap_or("");
    let params = &message["params"];
    let target = params["name"].as_str().or_else(|| params["uri"].as_str());
    let name = match target {
        Some(t) => format!("{method} {t}"),
        None => method.to_owned(),
    };
    let version = params["_meta"]["io.modelcontextprotocol/protocolVersion"]
        .as_str()
        .map(str::to_owned)
        .or_else(|| {
            headers
                .get("mcp-protocol-version")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        })
        .unwrap_or_default();
    let span = tracing::info_span!(
        "mcp.server",
        otel.name = %name,
        otel.kind = "server",
        mcp.method.name = %method,
        mcp.protocol.version = %version,
        jsonrpc.request.id = %message.get("id").map(|v| v.to_string()).unwrap_or_default(),
        gen_ai.tool.name = tracing::field::Empty,
        gen_ai.operation.name = tracing::field::Empty,
        error.type = tracing::field::Empty,
    );
    if method == "tools/call"
        && let Some(tool) = target
    {
        span.record("gen_ai.tool.name", tool);
        span.record("gen_ai.operation.name", "execute_tool");
    }
    let parent = match params["_meta"].as_object() {
        Some(meta) if meta.contains_key("traceparent") => {
            opentelemetry::global::get_text_map_propagator(|p| p.extract(&MetaExtractor(meta)))
        }
        _ => ithaca_kit::propagation::extract(headers),
    };
    let _ = span.set_parent(parent);
    span
}

async fn mcp_entry(State(edge): State<Arc<Edge>>, request: Request) -> Response {
    let started = Instant::now();
    let (mut parts, body) = request.into_parts();
    if parts.method == Method::OPTIONS {
        return edge.preflight(&parts.headers);
    }
    let origin = parts.headers.get(header::ORIGIN).cloned();
    let response = mcp_request(&edge, started, &mut parts, body).await;
    edge.with_cors(origin.as_ref(), response)
}

async fn mcp_request(
    edge: &Arc<Edge>,
    started: Instant,
    parts: &mut http::request::Parts,
    body: Body,
) -> Response {
    if let Err(refused) = edge.check_origin(&parts.headers) {
        return refused;
    }
    let principal = match edge
        .authenticate(&parts.headers, client_of(&parts.extensions))
        .await
    {
        Ok(p) => p,
        Err(refused) => return refused,
    };
    // Before the body is read: a caller over its limit costs no more.
    if let Err(limited) = edge.limiter.admit(&principal).await {
        return limited.response();
    }
    // Responses are JSON unless a call streams, so a client that accepts
    // only JSON (or anything) is served; rmcp wants both MCP types listed.
    let accept = parts
        .headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let accepts_events = accept.contains("text/event-stream");
    let wants_json = accept.is_empty()
        || accept.contains("*/*")
        || accept.contains("application/*")
        || accept.contains("application/json");
    if wants_json && !accept.contains("text/event-stream") {
        parts.headers.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
    }
    let modern_header = parts
        .headers
        .get("mcp-protocol-version")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v >= crate::mcp::NO_INITIALIZE_FROM);
    if parts.method == Method::GET && accepts_events && !modern_header {
        return legacy_stream(edge, &principal, parts.headers.clone());
    }
    if parts.method != Method::POST {
        // rmcp answers GET (2026-07-28 has none) and DELETE (there is no
        // session to end) with 405.
        let request = Request::from_parts(parts.clone(), Body::empty());
        let response = edge.mcp.clone().oneshot(request).await;
        return response
            .map(|r| r.map(Body::new))
            .unwrap_or_else(|never| match never {});
    }

    let bytes = match axum::body::to_bytes(body, edge.options.body_limit).await {
        Ok(b) => b,
        Err(error) => return body_refused(&error, edge.options.body_limit),
    };
    let scoped = matches!(edge.callers, Callers::Keys(_));
    let (message, scopes, method) = match screen(&edge.core.catalog, &parts.headers, &bytes) {
        Screened::Refused(refused) => return refused,
        Screened::Batch { scopes, members } => {
            if scoped && let Some(missing) = scopes.iter().find(|s| !principal.has_scope(s)) {
                return edge.missing_scope(&scopes, missing);
            }
            if let Err(refused) = crate::batch::check(&parts.headers, &members) {
                return refused;
            }
            return serve_batch(edge, started, parts, principal, members).await;
        }
        Screened::Message {
            message,
            scopes,
            method,
        } => (message, scopes, method),
    };
    if scoped && let Some(missing) = scopes.iter().find(|s| !principal.has_scope(s)) {
        return edge.missing_scope(&scopes, missing);
    }
    serve_message(edge, started, parts, principal, message, method, bytes).await
}

/// A 2025-03-26 batch, its members served one after another in order (so
/// a session's trace keeps the batch's order) through the same path as a
/// single message; their answers come back as one JSON array, or as 202
/// when every member was a notification or a response.
async fn serve_batch(
    edge: &Arc<Edge>,
    started: Instant,
    parts: &mut http::request::Parts,
    principal: Principal,
    members: Vec<Value>,
) -> Response {
    let mut answers = Vec::with_capacity(members.len());
    for member in members {
        let id = member.get("id").cloned().unwrap_or(Value::Null);
        let response = match crate::batch::member_refusal(&member) {
            Some(refused) => refused,
            None => {
                let bytes = bytes::Bytes::from(member.to_string());
                match screen(&edge.core.catalog, &parts.headers, &bytes) {
                    Screened::Refused(refused) => refused,
                    Screened::Batch { .. } => crate::batch::nested(),
                    Screened::Message {
                        message, method, ..
                    } => {
                        let principal = principal.clone();
                        serve_message(edge, started, parts, principal, message, method, bytes).await
                    }
                }
            }
        };
        answers.extend(crate::batch::answers(response, id).await);
    }
    crate::batch::combine(answers)
}

/// One JSON-RPC message whose caller holds the scopes it needs: a legacy
/// client's answer is delivered to the call that asked; anything else is
/// served by `rmcp` inside the request's server span.
async fn serve_message(
    edge: &Arc<Edge>,
    started: Instant,
    parts: &mut http::request::Parts,
    principal: Principal,
    message: Value,
    method: String,
    bytes: bytes::Bytes,
) -> Response {
    // A legacy client's answer to a request a running call made on its
    // response stream.
    if message.get("method").is_none() {
        if edge.asks.answer(&principal, message.clone()) {
            edge.metrics.record(&method, "", started.elapsed());
            return StatusCode::ACCEPTED.into_response();
        }
        // One another replica asked for: it takes the answer there (and
        // checks the caller itself). A forwarded answer goes no further.
        let owner = message["id"]
            .as_str()
            .filter(|_| !parts.headers.contains_key(crate::relay::FORWARDED_HEADER))
            .and_then(|id| edge.asks.elsewhere(id));
        if let Some(owner) = owner {
            let response = forward_answer(edge, &owner, &parts.headers, bytes).await;
            edge.metrics
                .record(&method, response.status().as_str(), started.elapsed());
            return response;
        }
    }
    edge.count_handshake(&message);
    let span = request_span(&message, &parts.headers);
    let revoked = {
        let edge = edge.clone();
        let headers = parts.headers.clone();
        crate::revoked::Revoked::new(move || {
            Box::pin(still_allowed(edge.clone(), false, headers.clone()))
        })
    };
    parts.extensions.insert(CallerInfo {
        principal,
        span: span.clone(),
        revoked,
    });
    let timeout = edge.request_timeout(&message);
    let request = Request::from_parts(parts.clone(), Body::from(bytes));
    let call = edge.mcp.clone().oneshot(request);
    let response = match tokio::time::timeout(timeout, call).await {
        Ok(Ok(response)) => response.map(Body::new),
        Ok(Err(never)) => match never {},
        Err(_) => {
            tracing::warn!(
                method = %method,
                timeout_ms = timeout.as_millis() as u64,
                "request timed out before its answer was ready"
            );
            let id = message.get("id").cloned().unwrap_or(Value::Null);
            jsonrpc_error(
                StatusCode::GATEWAY_TIMEOUT,
                id,
                codes::INTERNAL_ERROR,
                "the request timed out",
            )
        }
    };
    let response = relay_asks(&message, response);
    let response = keep_listening(&message, response);
    let status = response.status();
    let error_type = if status.is_client_error() || status.is_server_error() {
        status.as_u16().to_string()
    } else {
        String::new()
    };
    if !error_type.is_empty() {
        span.record("error.type", error_type.as_str());
    }
    edge.metrics.record(&method, &error_type, started.elapsed());
    response
}

/// How long forwarding an answer to the replica holding its call may take.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);

/// Forward a legacy client's answer, as it sent it (its credentials
/// included, so the owner authenticates it), to the replica at `owner`
/// that holds the call; the owner's status is the answer's.
async fn forward_answer(
    edge: &Edge,
    owner: &str,
    headers: &HeaderMap,
    body: bytes::Bytes,
) -> Response {
    let mut request = http::Request::new(http_body_util::Full::new(body));
    *request.method_mut() = Method::POST;
    let Ok(uri) = format!("{owner}/mcp").parse::<http::Uri>() else {
        return plain(
            StatusCode::BAD_GATEWAY,
            "the replica holding this call has a bad URL",
        );
    };
    *request.uri_mut() = uri;
    for name in [
        header::AUTHORIZATION,
        header::CONTENT_TYPE,
        header::ACCEPT,
        header::HOST,
        header::ORIGIN,
    ]
    .into_iter()
    .chain(["mcp-protocol-version".parse().ok()].into_iter().flatten())
    {
        if let Some(value) = headers.get(&name) {
            request.headers_mut().insert(name, value.clone());
        }
    }
    request.headers_mut().insert(
        crate::relay::FORWARDED_HEADER,
        HeaderValue::from_static("1"),
    );
    match tokio::time::timeout(FORWARD_TIMEOUT, edge.forwarder.request(request)).await {
        Ok(Ok(response)) => {
            let (parts, body) = response.into_parts();
            Response::from_parts(parts, Body::new(body))
        }
        Ok(Err(error)) => {
            tracing::warn!(%error, owner, "forwarding an answer failed");
            plain(
                StatusCode::BAD_GATEWAY,
                "the edge replica holding this call is unreachable; the call fails when its \
                 wait for an answer ends",
            )
        }
        Err(_) => plain(
            StatusCode::GATEWAY_TIMEOUT,
            "the edge replica holding this call did not take the answer in time",
        ),
    }
}

/// `GET /mcp` of a legacy client: the stream the initialize profile sends
/// what belongs to no request on, here the `notifications/resources/updated`
/// of the caller's subscriptions. The stateless edge has no protocol
/// session to key it by, so it is keyed by the authenticated caller
/// (tenant, key, agent): every GET stream a caller holds on this replica
/// gets the updates of every subscription it made here. Like the trace
/// stream, it ends when the caller's key stops verifying.
fn legacy_stream(edge: &Arc<Edge>, principal: &Principal, headers: HeaderMap) -> Response {
    let updates = tokio_stream::wrappers::ReceiverStream::new(
        edge.subscriptions.open_stream(principal),
    )
    .map(|message| Ok::<_, std::convert::Infallible>(Event::default().data(message.to_string())));
    let revoked = still_allowed(edge.clone(), false, headers);
    Sse::new(updates.take_until(revoked))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

/// How often an idle `subscriptions/listen` stream gets an SSE comment.
const LISTEN_KEEP_ALIVE: Duration = Duration::from_secs(15);

/// A `subscriptions/listen` stream with an SSE comment every
/// [`LISTEN_KEEP_ALIVE`] while nothing else is sent: a balancer or proxy
/// does not cut a quiet stream as idle, and a client that went away is
/// noticed at the next write, which ends the listen and its watches.
/// Any other response unchanged.
fn keep_listening(message: &Value, response: Response) -> Response {
    let streams = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if message["method"] != "subscriptions/listen" || !streams {
        return response;
    }
    let (parts, body) = response.into_parts();
    let start = tokio::time::Instant::now() + LISTEN_KEEP_ALIVE;
    let state = (
        body.into_data_stream(),
        tokio::time::interval_at(start, LISTEN_KEEP_ALIVE),
        // Whether the last chunk ended an event, so a comment never lands
        // inside one.
        true,
    );
    let events = futures::stream::unfold(state, |(mut body, mut tick, between)| async move {
        tokio::select! {
            chunk = body.next() => {
                let chunk = chunk?;
                let between = chunk.as_ref().map_or(between, |c| c.ends_with(b"\n\n"));
                Some((chunk, (body, tick, between)))
            }
            _ = tick.tick(), if between => {
                Some((Ok(bytes::Bytes::from_static(b": keep-alive\n\n")), (body, tick, between)))
            }
        }
    });
    Response::from_parts(parts, Body::from_stream(events))
}

/// A legacy call's response stream with its marker notifications
/// rewritten into requests to the client (`relay::rewrite_event`); any
/// other response unchanged.
fn relay_asks(message: &Value, response: Response) -> Response {
    let may_ask = matches!(
        message["method"].as_str(),
        Some("tools/call" | "prompts/get")
    ) && !is_modern(message);
    let streams = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if !may_ask || !streams {
        return response;
    }
    let (parts, body) = response.into_parts();
    let mut pending: Vec<u8> = Vec::new();
    let events = body.into_data_stream().map(move |chunk| {
        let chunk = chunk?;
        pending.extend_from_slice(&chunk);
        let mut out = Vec::new();
        while let Some(end) = pending.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = pending.drain(..end + 2).collect();
            out.extend_from_slice(&crate::relay::rewrite_event(&event));
        }
        Ok::<_, axum::Error>(bytes::Bytes::from(out))
    });
    Response::from_parts(parts, Body::from_stream(events))
}

async fn readyz(State(edge): State<Arc<Edge>>) -> Response {
    let mut failing = Vec::new();
    for backend in edge.core.backends() {
        let mut health = tonic_health::pb::health_client::HealthClient::new(backend.channel());
        let check = health.check(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        });
        let serving = matches!(
            tokio::time::timeout(Duration::from_secs(2), check).await,
            Ok(Ok(r)) if r.get_ref().status == tonic_health::pb::health_check_response::ServingStatus::Serving as i32
        );
        if !serving {
            failing.push(backend.url.clone());
        }
    }
    if failing.is_empty() {
        plain(StatusCode::OK, "ready")
    } else {
        plain(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {}", failing.join(", ")),
        )
    }
}

async fn metrics(State(edge): State<Arc<Edge>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        edge.metrics.render() + &edge.limiter.render(&edge.core.backends()) + &doors(&edge),
    )
        .into_response()
}

/// The metrics of the doors: legacy subscriptions held, and key checks
/// the throttle refused (`throttle.rs`).
fn doors(edge: &Edge) -> String {
    let mut out = format!(
        "# HELP ithaca_edge_resource_subscriptions Legacy resource subscriptions held on this replica.\n\
         # TYPE ithaca_edge_resource_subscriptions gauge\n\
         ithaca_edge_resource_subscriptions {}\n",
        edge.subscriptions.live()
    );
    if let Callers::Keys(auth) = &edge.callers {
        out.push_str(&format!(
            "# HELP ithaca_edge_key_checks_throttled_total Key checks refused for too many failures of their key id or address.\n\
             # TYPE ithaca_edge_key_checks_throttled_total counter\n\
             ithaca_edge_key_checks_throttled_total {}\n",
            auth.throttled()
        ));
    }
    out
}

async fn resource_metadata(State(edge): State<Arc<Edge>>) -> Response {
    let base = edge.options.public_url.trim_end_matches('/');
    let mut body = json!({
        "resource": format!("{base}/mcp"),
        "bearer_methods_supported": ["header"],
        "scopes_supported": ithaca_proto::scopes::ALL,
        "resource_name": "Ithaca",
    });
    // A URL (RFC 9728 §2): clients that validate the document (the
    // official Python SDK) discard all of it when this is prose. The
    // console, where there is one, is where a person connects an app.
    if edge.browser.is_some() {
        body["resource_documentation"] = json!(format!("{base}/console"));
    }
    let servers = authorization_servers(&edge);
    if !servers.is_empty() {
        body["authorization_servers"] = json!(servers);
    }
    axum::Json(body).into_response()
}

/// The authorization servers this edge trusts: its built-in one (the same
/// origin) when the console that serves it is mounted, which is whenever
/// keys are checked, and the external issuers configured with
/// `--oauth-issuer`. With none, none is named: naming one that serves no
/// metadata would send OAuth-capable hosts looking in vain.
fn authorization_servers(edge: &Edge) -> Vec<String> {
    let mut servers = Vec::new();
    if edge.browser.is_some() {
        servers.push(edge.options.public_url.trim_end_matches('/').to_owned());
    }
    if let Callers::Keys(auth) = &edge.callers {
        for issuer in auth.oauth_issuers() {
            if !servers.contains(&issuer) {
                servers.push(issuer);
            }
        }
    }
    servers
}

/// `GET /api/sessions/{id}/events/stream`: the session's trace as SSE, with
/// `id:` = seq, replayed after `Last-Event-ID` (or `?after=N`), then live.
async fn trace_stream(
    State(edge): State<Arc<Edge>>,
    Path(session_id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    extensions: http::Extensions,
    headers: HeaderMap,
) -> Response {
    if let Err(refused) = edge.check_origin(&headers) {
        return refused;
    }
    let from_browser = match &edge.browser {
        Some(browser) if !headers.contains_key(header::AUTHORIZATION) => {
            browser.principal(&headers).await
        }
        _ => None,
    };
    let signed_in = from_browser.is_some();
    let principal = match from_browser {
        Some(p) => p,
        None => match edge.authenticate(&headers, client_of(&extensions)).await {
            Ok(p) => p,
            Err(refused) => return refused,
        },
    };
    let after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| query.get("after").cloned());
    let after_seq = match after.as_deref().map(str::trim) {
        None | Some("") => 0,
        Some(text) => match text.parse::<i64>() {
            Ok(n) if n >= 0 => n,
            _ => {
                return plain(
                    StatusCode::BAD_REQUEST,
                    "after / Last-Event-ID: expected a non-negative integer",
                );
            }
        },
    };
    let Some(mut client) = edge.core.session_client() else {
        return plain(StatusCode::NOT_FOUND, "this edge has no session service");
    };
    let mut request = tonic::Request::new(spb::TailEventsRequest {
        session_id,
        after_seq,
    });
    edge.core.sign(&mut request, &principal);
    // A stalled session service must not hold the request open: the stream
    // starts within the request timeout or not at all.
    request.set_timeout(edge.options.request_timeout);
    let stream = match client.tail_events(request).await {
        Ok(r) => r.into_inner(),
        Err(status)
            if matches!(
                status.code(),
                tonic::Code::NotFound | tonic::Code::InvalidArgument
            ) =>
        {
            return plain(StatusCode::NOT_FOUND, "no such session");
        }
        Err(status) => {
            tracing::warn!(error = %status.message(), "trace stream unavailable");
            return plain(
                StatusCode::SERVICE_UNAVAILABLE,
                "the session service is unavailable, retry later",
            );
        }
    };
    let events = stream
        .take_while(|item| std::future::ready(item.is_ok()))
        .filter_map(|item| async move {
            let event = item.ok()?;
            let payload = event
                .payload
                .map(ithaca_kit::json::from_struct)
                .unwrap_or(Value::Null);
            let data = json!({
                "session_id": event.session_id,
                "seq": event.seq,
                "type": event.r#type,
                "payload": payload,
                "created_at": event.created_at,
                "trace_id": event.trace_id,
            });
            Some(Ok::<_, std::convert::Infallible>(
                Event::default()
                    .id(event.seq.to_string())
                    .event(sse_event_name(&event.r#type))
                    .data(data.to_string()),
            ))
        });
    // The caller is checked again while the stream is open, as often as a
    // verified key may be cached, so a revoked key (or a signed-out
    // cookie's key) ends the stream within the cache window plus one check
    // instead of never. A check that cannot be made (auth unreachable)
    // ends it too: the client reconnects from its last `seq` once the key
    // verifies again.
    let revoked = still_allowed(edge.clone(), signed_in, headers);
    Sse::new(events.take_until(revoked))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

/// The SSE `event:` name of a trace event of `kind`: its type, except
/// `error` (a failed call), sent as `call_error`. A browser's `EventSource`
/// takes an event named `error` for its own connection-error event, so a
/// failed call made every open console page say "reconnecting…" for good.
/// The JSON `type` in `data` stays `error`.
pub(crate) fn sse_event_name(kind: &str) -> &str {
    if kind == "error" { "call_error" } else { kind }
}

/// Resolves once the caller of a long-lived request (a trace stream, a
/// legacy GET stream, a listen, a legacy subscription) is no longer
/// allowed in: its bearer key (or, when `signed_in`, its console sign-in)
/// no longer verifies. Never resolves for a local caller (authentication
/// off).
async fn still_allowed(edge: Arc<Edge>, signed_in: bool, headers: HeaderMap) {
    let every = match (&edge.callers, signed_in) {
        (_, true) => crate::auth::MAX_CACHE_TTL,
        (Callers::Keys(auth), false) => auth.recheck_interval(),
        (Callers::Local(_), false) => return std::future::pending().await,
    };
    loop {
        tokio::time::sleep(every).await;
        let allowed = if signed_in {
            match &edge.browser {
                Some(browser) => browser.principal(&headers).await.is_some(),
                None => false,
            }
        } else {
            edge.still_verifies(&headers).await
        };
        if !allowed {
            tracing::info!("a long-lived request ended: its caller no longer verifies");
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::sse_event_name;

    #[test]
    fn a_failed_calls_event_is_not_named_error() {
        assert_eq!(sse_event_name("error"), "call_error");
        for kind in ["tool_call", "tool_result", "denial", "session_closed"] {
            assert_eq!(sse_event_name(kind), kind);
        }
    }
}
