//! The MCP edge: the one door agents use.
//!
//! - [`catalog`] and [`schema`]: tools, resources and prompts from the
//!   `ithaca.mcp.v1` annotations, with JSON Schemas derived from messages.
//! - [`discover`]: descriptors of other backends through gRPC reflection.
//! - [`transcode`] and [`backend`]: JSON ⇄ dynamic protobuf and the unary
//!   gRPC hop, with deadline, principal assertion and trace context.
//! - [`core`]: what a request needs once parsed (catalog, backends, the
//!   trace append); [`call`]: the tool pipeline, one stage a file
//!   (lookup, gate, invoke or approval, record, render); [`resources`] and
//!   [`prompts`]; [`stream`]: the streaming mapping (progress, logs, input during a
//!   call, the sealed `requestState`).
//! - [`mcp`]: the `rmcp` handler for both protocol eras; [`front`]: the HTTP
//!   front, `/mcp` as a stack of layers (Host/Origin, keys, limits, the
//!   one parse, scopes, batches, answer forwarding, the span) and the SSE
//!   trace stream, health and metrics beside it; [`relay`]: a running call's notices and legacy input
//!   requests to its client; [`auth`]: key verification with a short cache,
//!   and [`throttle`]: failed key checks per key id and client address;
//!   [`listener`]: the HTTP listener's connection cap and header, body and
//!   idle timeouts; [`limits`]: rate limits and quotas per key and tenant
//!   (counters shared through the auth service); [`oauth`]: JWT access
//!   tokens of external identity providers (`--oauth-issuer`).
//!
//! Architecture invariant: the edge owns no durable state and opens no
//! database; everything it knows it asks a service for over gRPC.

#![forbid(unsafe_code)]

pub mod appends;
pub mod auth;
pub mod backend;
pub mod call;
pub mod catalog;
pub mod core;
pub mod discover;
pub mod front;
pub mod limits;
pub mod listener;
pub mod mcp;
pub mod metrics;
pub mod oauth;
pub mod orphans;
pub mod prompts;
pub mod relay;
pub mod resources;
pub mod revoked;
pub mod schema;
pub mod stream;
pub mod subscribe;
pub mod throttle;
pub mod transcode;

use crate::backend::Backend;
use crate::catalog::{Catalog, CatalogError};
use ithaca_kit::principal::InternalKey;
use std::collections::HashMap;
use std::time::Duration;

/// The deadline of a backend call when none is configured.
pub const DEFAULT_BACKEND_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the edge finds its backends.
#[derive(Clone, Debug, Default)]
pub struct Backends {
    /// The auth service (needed to verify keys over HTTP).
    pub auth_url: Option<String>,
    /// The session service (gate and trace).
    pub session_url: Option<String>,
    /// The broker process: market data and accounts, alerts, catalogs,
    /// filters, GCN events and fundamentals, each its own gRPC service.
    pub broker_url: Option<String>,
    /// The skills service (catalog and runs).
    pub skills_url: Option<String>,
    /// The approvals service (policy and approvals).
    pub approvals_url: Option<String>,
    /// Further backends whose descriptors come from their reflection.
    pub reflected: Vec<String>,
    /// Deadline of each backend call (zero: [`DEFAULT_BACKEND_TIMEOUT`]).
    pub timeout: Duration,
    /// Calls in flight to one backend URL at most; more are refused with
    /// the retryable `BACKEND_BUSY` (zero:
    /// [`backend::DEFAULT_MAX_IN_FLIGHT`]).
    pub max_in_flight: usize,
    /// Serve tools with no session service, so no session gate and no
    /// trace: only for protocol fixtures such as the conformance suite's.
    /// Without it an edge with tools and no session service refuses to
    /// build, because seed 002 forbids unscoped tool calls.
    pub ungated: bool,
}

/// Building the edge failed.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Url(#[from] ithaca_kit::client::BadUrl),
    #[error("reflecting on {url}: {source}")]
    Discover {
        url: String,
        source: discover::DiscoverError,
    },
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error(
        "tools {0} would run without the session gate: give the edge a session service \
         (--session-url), or pass --no-session-gate for a protocol fixture"
    )]
    NoSessionGate(String),
}

/// Build the core: routes for the built-in services from the embedded
/// descriptors, and for reflected backends from what they report.
pub async fn build_core(backends: &Backends, key: InternalKey) -> Result<core::Core, BuildError> {
    let timeout = if backends.timeout.is_zero() {
        DEFAULT_BACKEND_TIMEOUT
    } else {
        backends.timeout
    };
    let built_in = [
        (ithaca_proto::service_names::AUTH, &backends.auth_url),
        (ithaca_proto::service_names::SESSION, &backends.session_url),
        (ithaca_proto::service_names::BROKER, &backends.broker_url),
        (ithaca_proto::service_names::ALERTS, &backends.broker_url),
        (ithaca_proto::service_names::CATALOGS, &backends.broker_url),
        (ithaca_proto::service_names::FILTERS, &backends.broker_url),
        (ithaca_proto::service_names::GCN, &backends.broker_url),
        (
            ithaca_proto::service_names::FUNDAMENTALS,
            &backends.broker_url,
        ),
        (
            ithaca_proto::service_names::APPROVALS,
            &backends.approvals_url,
        ),
        (ithaca_proto::service_names::SKILLS, &backends.skills_url),
    ];
    // One backend (channel and concurrency gate) per URL: the broker's
    // services share their process's limit.
    let mut by_url: HashMap<String, Backend> = HashMap::new();
    let mut backend_at = |url: &str| -> Result<Backend, BuildError> {
        if let Some(b) = by_url.get(url) {
            return Ok(b.clone());
        }
        let b = Backend::new(url, timeout)?.with_max_in_flight(backends.max_in_flight);
        by_url.insert(url.to_owned(), b.clone());
        Ok(b)
    };
    let mut routes = HashMap::new();
    for (service, url) in built_in {
        if let Some(url) = url {
            routes.insert(service.to_owned(), backend_at(url)?);
        }
    }
    let mut catalog = Catalog::from_pool(ithaca_proto::annotations::pool())?;
    for url in &backends.reflected {
        let backend = backend_at(url)?;
        let (services, pool) = discover::reflect(backend.channel())
            .await
            .map_err(|source| BuildError::Discover {
                url: url.clone(),
                source,
            })?;
        for service in services {
            routes.insert(service, backend.clone());
        }
        catalog.add_pool(&pool)?;
    }
    // Offer only what some backend serves.
    let served =
        |m: &prost_reflect::MethodDescriptor| routes.contains_key(m.parent_service().full_name());
    catalog.tools.retain(|t| served(&t.method));
    catalog.resources.retain(|r| served(&r.method));
    catalog.prompts.retain(|p| served(&p.method));
    // Only the session service's own tool (session_context) opens sessions
    // and so runs before one exists; another backend cannot exempt its
    // tools from the gate by marking them.
    for tool in &mut catalog.tools {
        if tool.method.parent_service().full_name() != ithaca_proto::service_names::SESSION {
            tool.options.session_exempt = false;
            tool.options.human_session_exempt = false;
        }
    }
    let has_gate = routes.contains_key(ithaca_proto::service_names::SESSION);
    if !has_gate && !backends.ungated {
        let gated: Vec<&str> = catalog
            .tools
            .iter()
            .filter(|t| !t.options.session_exempt)
            .map(|t| t.name.as_str())
            .take(5)
            .collect();
        if !gated.is_empty() {
            return Err(BuildError::NoSessionGate(gated.join(", ")));
        }
    }
    Ok(core::Core::new(catalog, routes, key))
}
