//! Who a request is from and how its call reaches its client: the
//! caller the HTTP front handed over (or the stdio session's), the session
//! it pins, and the sink for its notices and input requests.

use super::info::{LOG_LEVEL_META, NO_INITIALIZE_FROM};
use crate::relay::{Asker, Asks, LogLevels, RequestSink};
use crate::revoked::Revoked;
use crate::stream::{ClientCaps, LogLevel};
use crate::subscribe::Deliver;
use ithaca_kit::principal::Principal;
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::Value;
use std::sync::Arc;

/// The request-scoped data the HTTP layer hands to the handler.
#[derive(Clone, Debug)]
pub struct CallerInfo {
    pub principal: Principal,
    /// The MCP server span of this request, so work done here joins it.
    pub span: tracing::Span,
    /// What ends the caller's long-lived work (a listen, a legacy
    /// subscription) once its key no longer verifies.
    pub revoked: Revoked,
}

/// The session a request pins itself to with `_meta`
/// [`crate::core::SESSION_PIN_META`], if it does; anything but a string is
/// refused.
pub(super) fn session_pin(ctx: &RequestContext<RoleServer>) -> Result<Option<String>, ErrorData> {
    pin_of(ctx.meta.get(crate::core::SESSION_PIN_META))
}

/// [`session_pin`] from the `_meta` value itself: the edge's own
/// `tools/call` path (`front/direct.rs`) reads it from its parse.
pub fn pin_of(value: Option<&Value>) -> Result<Option<String>, ErrorData> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(id)) if !id.trim().is_empty() && id.len() <= 100 => {
            Ok(Some(id.trim().to_owned()))
        }
        Some(_) => Err(ErrorData::invalid_params(
            format!(
                "_meta.{}: must be a session id (a string)",
                crate::core::SESSION_PIN_META
            ),
            None,
        )),
    }
}

/// Who a gateway's requests come from and how their calls reach them.
/// Cheap to clone.
#[derive(Clone, Default)]
pub(super) struct Reach {
    /// The principal of a stdio session (no authentication there).
    pub(super) fixed: Option<Principal>,
    /// Legacy HTTP clients' answers to requests made during a call; the
    /// HTTP front delivers them.
    pub(super) asks: Arc<Asks>,
    /// The level each legacy caller set with `logging/setLevel`.
    pub(super) levels: Arc<LogLevels>,
}

impl Reach {
    /// Where a legacy subscription's updates go: the stdio session's peer,
    /// or the caller's GET streams over HTTP.
    pub(super) fn deliver(&self, ctx: &RequestContext<RoleServer>) -> Deliver {
        match self.fixed {
            Some(_) => Deliver::Peer(ctx.peer.clone()),
            None => Deliver::Streams,
        }
    }

    /// How a request's call reaches its client while it runs: the sink for
    /// its notices and input requests, the client's capabilities, and
    /// whether it answers on the response stream (legacy) or by retrying
    /// (2026-07-28, whose answers and state `retry` holds).
    pub(super) fn call_io(
        &self,
        ctx: &RequestContext<RoleServer>,
        caller: &Principal,
    ) -> Result<(RequestSink, ClientCaps, bool), ErrorData> {
        let modern = ctx
            .protocol_version()
            .is_some_and(|v| v.as_str() >= NO_INITIALIZE_FROM);
        let log_level = if modern {
            // 2026-07-28: the request names its level, or gets no messages.
            match ctx.meta.get(LOG_LEVEL_META) {
                None | Some(Value::Null) => None,
                Some(Value::String(name)) => Some(LogLevel::parse(name).ok_or_else(|| {
                    ErrorData::invalid_params(
                        format!("_meta.{LOG_LEVEL_META}: unknown level {name:?}"),
                        None,
                    )
                })?),
                Some(_) => {
                    return Err(ErrorData::invalid_params(
                        format!("_meta.{LOG_LEVEL_META}: must be a level name"),
                        None,
                    ));
                }
            }
        } else {
            Some(self.levels.get(caller))
        };
        let declared = || {
            ctx.client_capabilities()
                .and_then(|c| serde_json::to_value(c).ok())
                .map(|c| ClientCaps::from_json(&c))
                .unwrap_or_default()
        };
        let (asker, client) = match (modern, &self.fixed) {
            (true, _) => (Asker::Never, declared()),
            (false, Some(_)) => (Asker::Peer, declared()),
            // A legacy HTTP client declared its capabilities in an
            // `initialize` the stateless edge did not keep: it is asked, and
            // one that cannot answer says so with an error.
            (false, None) => (
                Asker::Http {
                    asks: self.asks.clone(),
                    owner: crate::relay::owner_of(caller),
                },
                ClientCaps::assumed(),
            ),
        };
        let sink = RequestSink {
            peer: ctx.peer.clone(),
            progress_token: ctx.meta.get_progress_token(),
            log_level,
            asker,
        };
        Ok((sink, client, !modern))
    }

    pub(super) fn caller(&self, ctx: &RequestContext<RoleServer>) -> Result<CallerInfo, ErrorData> {
        if let Some(principal) = &self.fixed {
            return Ok(CallerInfo {
                principal: principal.clone(),
                span: tracing::Span::current(),
                revoked: Revoked::default(),
            });
        }
        ctx.extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<CallerInfo>())
            .cloned()
            .ok_or_else(|| ErrorData::internal_error("request arrived without a caller", None))
    }
}
