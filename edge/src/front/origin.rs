//! The outermost layer: `Host`, `Origin` and CORS.
//!
//! A browser page served from another name (DNS rebinding) or another
//! origin must learn nothing from the edge, not even whether a key is
//! valid, so this runs before authentication. A CORS preflight carries no
//! credentials and is answered here too.

// Refusals are finished HTTP responses; boxing them would only add noise.
#![allow(clippy::result_large_err)]

use super::answer::plain;
use super::options::HttpOptions;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use std::time::Instant;

/// When a request reached the edge, stamped by the outermost layer so the
/// request metrics count the whole front (authentication included).
#[derive(Clone, Copy, Debug)]
pub struct Arrived(pub Instant);

/// Which hosts and origins may call.
#[derive(Clone, Debug)]
pub struct Origins {
    /// `host[:port]` of the public URL, lowercased.
    public_host: String,
    /// Browser origins allowed to call cross-origin (`*` for any).
    cors_origins: Vec<String>,
}

/// The layer: a preflight is answered, a foreign `Host` or `Origin` is
/// refused, and an allowed cross-origin caller may read the answer.
pub async fn layer(State(origins): State<Arc<Origins>>, request: Request, next: Next) -> Response {
    let arrived = Arrived(Instant::now());
    if request.method() == Method::OPTIONS {
        return origins.preflight(request.headers());
    }
    let origin = request.headers().get(header::ORIGIN).cloned();
    let response = match origins.check(request.headers()) {
        Err(refused) => refused,
        Ok(()) => {
            let mut request = request;
            request.extensions_mut().insert(arrived);
            next.run(request).await
        }
    };
    origins.with_cors(origin.as_ref(), response)
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

/// The host name without a port (IPv6 literals keep their brackets).
fn hostname(host: &str) -> &str {
    if host.starts_with('[') {
        return host
            .split_once(']')
            .map_or(host, |(h, _)| &host[..=h.len()]);
    }
    host.rsplit_once(':').map_or(host, |(h, _)| h)
}

impl Origins {
    pub fn new(options: &HttpOptions) -> Self {
        Origins {
            public_host: host_of(&options.public_url).unwrap_or_default(),
            cors_origins: options.cors_origins.clone(),
        }
    }

    /// Whether `origin` (as the browser sent it) may call cross-origin.
    fn cors_allowed(&self, origin: &str) -> bool {
        let origin = origin.trim_end_matches('/');
        self.cors_origins
            .iter()
            .any(|o| o == "*" || o.trim_end_matches('/').eq_ignore_ascii_case(origin))
    }

    /// DNS-rebinding defence: a foreign `Host`, or an `Origin` that is not
    /// this server nor an allowed CORS origin, is refused. This server is
    /// the `Host` the request names or the public URL, port and all, as
    /// the console's POSTs check: another port of loopback is another
    /// origin (any local web page), not this edge.
    pub fn check(&self, headers: &HeaderMap) -> Result<(), Response> {
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("");
        if !host_allowed(&self.public_host, host) {
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
