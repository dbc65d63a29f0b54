//! Relaying what a running call tells or asks its MCP client: progress and
//! log notices onto the request's response stream, and, in the legacy era,
//! the server-to-client requests (`elicitation/create`,
//! `sampling/createMessage`, `roots/list`) a streaming RPC's
//! `input_required` becomes.
//!
//! Over stdio a legacy client holds a session, so requests go through
//! `rmcp`'s peer. Over stateless HTTP `rmcp` has no way back for the
//! client's answer (it refuses JSON-RPC responses), so the edge carries it
//! itself: the handler emits a marker notification ([`ASK_MARKER`]) that the
//! HTTP layer rewrites into a JSON-RPC request with an unguessable id on the
//! response stream ([`rewrite_event`]), and the client's answer, POSTed
//! back, is handed to the waiting call by [`Asks`]. The answer must reach
//! the replica holding the call's response stream, and only the caller that
//! made the call can answer it.
//!
//! Behind a balancer the answer may land on another replica. A replica
//! started with an advertised internal URL names itself in the ids it
//! issues, sealed (ChaCha20-Poly1305 under a key derived from the edges'
//! shared internal key) so a client can neither read the URL nor make one
//! up; a replica that does not hold the request opens the id and forwards
//! the answer, as the client sent it, to the replica that does
//! ([`Asks::elsewhere`]). The owner authenticates the forwarded answer
//! itself, so it still takes answers only from the caller it asked.

mod asks;

pub use asks::{ASK_KEY_PURPOSE, Asks};

use crate::stream::{AskError, CallSink, LogLevel, Notice};
use futures::future::BoxFuture;
use ithaca_kit::principal::Principal;
use rmcp::RoleServer;
use rmcp::model::{ProgressToken, ServerNotification, ServerRequest};
use rmcp::service::Peer;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// The method of the marker notification the HTTP layer turns into a
/// server-to-client request. Never reaches a client as itself.
pub const ASK_MARKER: &str = "notifications/io.ithaca/ask";

/// How long a call waits for a client's answer (a person may be typing).
pub const ASK_TIMEOUT: Duration = Duration::from_secs(600);

/// Most callers whose legacy log level is remembered.
const MAX_LEVELS: usize = 10_000;

/// Who may answer a request, and whose log level is whose: tenant, key and
/// agent of a caller.
pub fn owner_of(principal: &Principal) -> String {
    format!(
        "{}/{}/{}",
        principal.tenant_id(),
        principal.key_id(),
        principal.agent()
    )
}

/// The header a forwarded answer carries, so it is never forwarded again.
pub const FORWARDED_HEADER: &str = "x-ithaca-forwarded-answer";

/// The log level each legacy caller set with `logging/setLevel`. The
/// legacy profile keeps the level for the session, and the stateless edge
/// has none, so it is remembered per caller (tenant, key, agent) on this
/// replica, bounded; a caller that never set one gets `info` and above.
#[derive(Default)]
pub struct LogLevels {
    levels: Mutex<HashMap<String, LogLevel>>,
}

impl LogLevels {
    pub fn set(&self, principal: &Principal, level: LogLevel) {
        let mut levels = self.levels.lock().unwrap_or_else(|e| e.into_inner());
        if levels.len() >= MAX_LEVELS && !levels.contains_key(&owner_of(principal)) {
            levels.clear();
        }
        levels.insert(owner_of(principal), level);
    }

    pub fn get(&self, principal: &Principal) -> LogLevel {
        let levels = self.levels.lock().unwrap_or_else(|e| e.into_inner());
        levels
            .get(&owner_of(principal))
            .copied()
            .unwrap_or(LogLevel::Info)
    }
}

/// How a request's server-to-client requests travel.
pub enum Asker {
    /// Through `rmcp`'s peer: a legacy stdio session.
    Peer,
    /// Through the HTTP layer's rewriting and [`Asks`]: legacy HTTP.
    Http {
        asks: std::sync::Arc<Asks>,
        owner: String,
    },
    /// Not at all: 2026-07-28 (the client retries with its answers).
    Never,
}

/// The [`CallSink`] of one MCP request.
pub struct RequestSink {
    pub peer: Peer<RoleServer>,
    /// The request's `_meta.progressToken`; without one, progress is
    /// dropped.
    pub progress_token: Option<ProgressToken>,
    /// The lowest level forwarded; `None`: no log messages.
    pub log_level: Option<LogLevel>,
    pub asker: Asker,
}

impl RequestSink {
    async fn send(&self, notification: Value) {
        match serde_json::from_value::<ServerNotification>(notification) {
            Ok(n) => {
                // A client that went away stops the call elsewhere; a lost
                // notice is not worth failing it for.
                if let Err(error) = self.peer.send_notification(n).await {
                    tracing::debug!(%error, "a notice could not be sent");
                }
            }
            Err(error) => tracing::warn!(%error, "building a notification failed"),
        }
    }

    async fn ask_http(
        &self,
        asks: &Asks,
        owner: &str,
        method: String,
        params: Value,
    ) -> Result<Value, AskError> {
        let no_answer = |why: &str| AskError::NoAnswer {
            method: method.clone(),
            why: why.to_owned(),
        };
        let Some((id, answer)) = asks.register(owner.to_owned()) else {
            return Err(no_answer("too many requests are waiting for answers"));
        };
        self.send(json!({
            "method": ASK_MARKER,
            "params": {"id": id, "method": method, "params": params},
        }))
        .await;
        let response = tokio::time::timeout(ASK_TIMEOUT, answer).await;
        asks.forget(&id);
        let response = match response {
            Err(_) => return Err(no_answer("no answer in time")),
            Ok(Err(_)) => return Err(no_answer("the request was dropped")),
            Ok(Ok(response)) => response,
        };
        if let Some(error) = response.get("error") {
            return Err(AskError::Refused {
                method,
                message: error["message"].as_str().unwrap_or("no message").to_owned(),
            });
        }
        Ok(response.get("result").cloned().unwrap_or(Value::Null))
    }

    async fn ask_peer(&self, method: String, params: Value) -> Result<Value, AskError> {
        let request: ServerRequest =
            serde_json::from_value(json!({"method": method, "params": params})).map_err(|e| {
                AskError::NoAnswer {
                    method: method.clone(),
                    why: format!("the request is malformed: {e}"),
                }
            })?;
        let answer = tokio::time::timeout(ASK_TIMEOUT, self.peer.send_request(request)).await;
        match answer {
            Err(_) => Err(AskError::NoAnswer {
                method,
                why: "no answer in time".to_owned(),
            }),
            Ok(Err(rmcp::ServiceError::McpError(error))) => Err(AskError::Refused {
                method,
                message: error.message.to_string(),
            }),
            Ok(Err(error)) => Err(AskError::NoAnswer {
                method,
                why: error.to_string(),
            }),
            Ok(Ok(result)) => serde_json::to_value(result).map_err(|e| AskError::NoAnswer {
                method,
                why: e.to_string(),
            }),
        }
    }
}

impl CallSink for RequestSink {
    fn notify(&self, notice: Notice) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            match notice {
                Notice::Progress {
                    progress,
                    total,
                    message,
                } => {
                    let Some(token) = &self.progress_token else {
                        return;
                    };
                    let mut params = json!({"progressToken": token, "progress": progress});
                    if let Some(total) = total {
                        params["total"] = json!(total);
                    }
                    if let Some(message) = message {
                        params["message"] = json!(message);
                    }
                    self.send(json!({"method": "notifications/progress", "params": params}))
                        .await;
                }
                Notice::Log {
                    level,
                    logger,
                    data,
                } => {
                    if self.log_level.is_none_or(|lowest| level < lowest) {
                        return;
                    }
                    let mut params = json!({"level": level.as_str(), "data": data});
                    if let Some(logger) = logger {
                        params["logger"] = json!(logger);
                    }
                    self.send(json!({"method": "notifications/message", "params": params}))
                        .await;
                }
            }
        })
    }

    fn ask(&self, method: String, params: Value) -> BoxFuture<'_, Result<Value, AskError>> {
        Box::pin(async move {
            match &self.asker {
                Asker::Never => Err(AskError::Unsupported),
                Asker::Peer => self.ask_peer(method, params).await,
                Asker::Http { asks, owner } => self.ask_http(asks, owner, method, params).await,
            }
        })
    }
}

/// One SSE event of a response stream, with a marker notification
/// rewritten into the JSON-RPC request it stands for; any other event
/// unchanged.
pub fn rewrite_event(event: &[u8]) -> Vec<u8> {
    let Ok(text) = std::str::from_utf8(event) else {
        return event.to_vec();
    };
    let Some(data) = text
        .lines()
        .find_map(|l| l.strip_prefix("data:"))
        .map(str::trim_start)
    else {
        return event.to_vec();
    };
    let Ok(message) = serde_json::from_str::<Value>(data) else {
        return event.to_vec();
    };
    if message["method"] != ASK_MARKER {
        return event.to_vec();
    }
    let params = &message["params"];
    let request = json!({
        "jsonrpc": "2.0",
        "id": params["id"],
        "method": params["method"],
        "params": params["params"],
    });
    format!("data: {request}\n\n").into_bytes()
}

#[cfg(test)]
mod tests;
