//! The HTTP front of the edge: `/mcp` as a stack of layers, one concern a
//! file, and what is served beside it.
//!
//! A request to `/mcp` passes these layers, outermost first (the order of
//! [`router_with`]'s `ServiceBuilder`, which says why each stands where it
//! does):
//!
//! 1. [`origin`]: CORS preflight, `Host` and `Origin` (DNS rebinding);
//! 2. [`authn`]: the key or token becomes a [`Principal`](ithaca_kit::principal::Principal) (401, 429, 503);
//! 3. [`limits`]: rate limits and quotas per key and tenant (429);
//! 4. [`sse::streams`]: a legacy GET is the caller's subscription stream;
//!    any method but POST goes to rmcp;
//! 5. [`screen`]: the body read and parsed once, the envelope, version,
//!    method and params checked (400, 404, 413);
//! 6. [`scopes`]: the caller holds what the message needs (403);
//! 7. [`batch`]: a 2025-03-26 batch is served member by member through
//!    the layers below;
//! 8. [`forward`]: a legacy client's answer goes to the call that asked,
//!    here or on another replica;
//! 9. [`span`]: the MCP server span and the request metrics;
//! 10. [`sse::rewrite`]: a legacy call's stream and a listen's keep-alive;
//! 11. [`serve`]: rmcp's Streamable HTTP service, within the deadline; a
//!     2026-07-28 `tools/call` that only its answer can follow is
//!     answered by the edge itself ([`direct`]).
//!
//! Beside it: [`trace_stream`] (a session's trace as SSE, which a console
//! sign-in may also open) and [`ops`] (health, readiness, metrics, the
//! resource metadata).

// Refusals are finished HTTP responses; boxing them would only add noise.
#![allow(clippy::result_large_err)]

pub mod answer;
pub mod authn;
pub mod batch;
pub mod direct;
pub mod forward;
pub mod limits;
pub mod ops;
pub mod options;
pub mod origin;
pub mod scopes;
pub mod screen;
pub mod serve;
pub mod span;
pub mod sse;
pub mod trace_stream;

#[cfg(test)]
mod tests;

pub use authn::{BrowserAuth, Callers, REALM};
pub use options::HttpOptions;
pub use origin::{host_allowed, host_of};
pub use screen::{Screened, screen};

use crate::core::Core;
use crate::mcp::Gateway;
use crate::metrics::Metrics;
use axum::Router;
use axum::middleware::{from_fn, from_fn_with_state};
use axum::routing::get;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use std::sync::Arc;
use tower::ServiceBuilder;

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
        // Host and Origin are checked by the origin layer.
        .disable_allowed_hosts()
        .with_max_request_body_bytes(options.body_limit);
    let handler = gateway.clone();
    let mcp = StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    // Keys share their counters through the auth service that verifies
    // them; a local caller's are kept here.
    let store = match &callers {
        Callers::Keys(auth) => auth.quota_store(),
        Callers::Local(_) => crate::limits::Store::local(),
    };
    let limiter = Arc::new(crate::limits::Limiter::new(
        options.rate_limits.clone(),
        store,
    ));
    let metrics = Arc::new(Metrics::default());
    let origins = Arc::new(origin::Origins::new(&options));
    let authn = Arc::new(authn::Authn::new(callers, &options, browser));
    let screen = Arc::new(screen::Screen {
        core: core.clone(),
        body_limit: options.body_limit,
    });
    let streams = Arc::new(sse::Streams {
        subscriptions: subscriptions.clone(),
        mcp: mcp.clone(),
    });
    let forward = Arc::new(forward::Forward::new(asks, metrics.clone()));
    let serve = serve::Serve {
        core: core.clone(),
        mcp,
        gateway,
        metrics: metrics.clone(),
        request_timeout: options.request_timeout,
    };
    let stack = ServiceBuilder::new()
        // A foreign page learns nothing, not even whether a key is valid,
        // and a preflight (which carries no credentials) is answered.
        .layer(from_fn_with_state(origins.clone(), origin::layer))
        // Everything inside needs to know who calls.
        .layer(from_fn_with_state(authn.clone(), authn::layer))
        // Counted per key and tenant, before the body is read: a caller
        // over its limit costs no more than its key check.
        .layer(from_fn_with_state(limiter.clone(), limits::layer))
        // A GET or a DELETE has no body to screen.
        .layer(from_fn_with_state(streams, sse::streams))
        // The one parse; every layer inside reads what it left.
        .layer(from_fn_with_state(screen.clone(), screen::layer))
        // Needs to know what the message is; refuses a batch whole.
        .layer(from_fn_with_state(authn.clone(), scopes::layer))
        // Its members go through everything below, one by one, in order.
        .layer(from_fn_with_state(screen, batch::layer))
        // An answer to a call's request is no operation of its own.
        .layer(from_fn_with_state(forward, forward::layer))
        // Covers all the operation's work, and counts what the client got.
        .layer(from_fn_with_state(metrics.clone(), span::layer))
        // Rewrites a call's event stream on its way out.
        .layer(from_fn(sse::rewrite))
        .service(tower::service_fn(move |request| serve.clone().run(request)));
    let trace = Router::new()
        .route("/api/sessions/{id}/events/stream", get(trace_stream::serve))
        .with_state(Arc::new(trace_stream::TraceStream {
            origins,
            authn: authn.clone(),
            core: core.clone(),
            request_timeout: options.request_timeout,
        }));
    let ops = ops::routes(Arc::new(ops::Ops {
        core,
        metrics,
        limiter,
        subscriptions,
        authn,
        public_url: options.public_url.trim_end_matches('/').to_owned(),
    }));
    Router::new()
        .route_service("/mcp", stack)
        .merge(trace)
        .merge(ops)
}
