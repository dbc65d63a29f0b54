//! The built-in OAuth 2.1 authorization server's HTTP face, on the console
//! router (same origin as the edge; the issuer is the edge's public URL):
//!
//! - RFC 8414 metadata at `/.well-known/oauth-authorization-server`, and
//!   the same document at `/.well-known/openid-configuration`;
//! - `/authorize` (GET: checks, sign-in, consent page; POST: the person's
//!   decision) in [`consent`];
//! - `/token`, `/register` (RFC 7591) and `/revoke` (RFC 7009) in
//!   [`endpoints`];
//! - [`cimd`]: Client ID Metadata Documents; [`redirect`]: which redirect
//!   URIs are allowed.
//!
//! Every record (clients, codes, grants, tokens) is the auth service's
//! (`ithaca.auth.v1.OAuthService`); like the rest of the console, this
//! module keeps nothing durable. Codes and tokens pass through in one
//! response and are never logged.

pub mod cimd;
pub mod consent;
pub mod endpoints;
pub mod redirect;

use crate::Console;
use axum::Router;
use axum::routing::{get, post};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The authorization server's in-memory helpers (no durable state).
#[derive(Debug, Default)]
pub struct State {
    pub fetcher: cimd::Fetcher,
    registrations: Mutex<Registrations>,
}

/// Registrations per client address in the current window, and overall.
#[derive(Debug, Default)]
struct Registrations {
    window_start: Option<Instant>,
    total: u32,
    by_address: HashMap<IpAddr, u32>,
}

/// Registration limits: per client address and per edge, per minute.
const REGISTRATION_WINDOW: Duration = Duration::from_secs(60);
const REGISTRATIONS_PER_ADDRESS: u32 = 10;
const REGISTRATIONS_TOTAL: u32 = 100;

impl State {
    /// The state, fetching metadata documents from private addresses too,
    /// and trusting `test_roots` for them, when `allow_private` (tests only).
    pub fn new(allow_private: bool, test_roots: Vec<Vec<u8>>) -> Self {
        State {
            fetcher: if allow_private {
                cimd::Fetcher::allowing_private().trusting(test_roots)
            } else {
                cimd::Fetcher::default()
            },
            registrations: Mutex::default(),
        }
    }

    /// Count a registration from `client`; false when over the limit.
    pub fn admit_registration(&self, client: Option<IpAddr>) -> bool {
        let Ok(mut r) = self.registrations.lock() else {
            return false;
        };
        let now = Instant::now();
        if r.window_start
            .is_none_or(|at| now.duration_since(at) >= REGISTRATION_WINDOW)
        {
            *r = Registrations {
                window_start: Some(now),
                ..Registrations::default()
            };
        }
        if r.total >= REGISTRATIONS_TOTAL {
            return false;
        }
        if let Some(ip) = client {
            let n = r.by_address.entry(ip).or_default();
            if *n >= REGISTRATIONS_PER_ADDRESS {
                return false;
            }
            *n += 1;
        }
        r.total += 1;
        true
    }
}

/// The scopes an app may be granted: all but `approvals:decide`, which is
/// a person's alone.
pub fn grantable_scopes() -> Vec<&'static str> {
    ithaca_proto::scopes::ALL
        .iter()
        .copied()
        .filter(|s| *s != ithaca_proto::scopes::APPROVALS_DECIDE)
        .collect()
}

impl Console {
    /// The issuer: the edge's public URL.
    pub fn issuer(&self) -> &str {
        self.public_url()
    }

    /// The canonical MCP URL tokens are issued for (RFC 8707 `resource`).
    pub fn canonical_resource(&self) -> String {
        format!("{}/mcp", self.public_url())
    }
}

/// The authorization server's routes (outside `/console`).
pub fn router(console: Arc<Console>) -> Router {
    Router::new()
        .route(
            "/.well-known/oauth-authorization-server",
            get(endpoints::metadata),
        )
        .route(
            "/.well-known/openid-configuration",
            get(endpoints::metadata),
        )
        .route("/authorize", get(consent::authorize).post(consent::decide))
        .route("/token", post(endpoints::token))
        .route("/register", post(endpoints::register))
        .route("/revoke", post(endpoints::revoke))
        .with_state(console)
}
