//! The streaming mapping (`proto/ithaca/mcp/v1/stream.proto`) on the edge's
//! side: reading a streaming RPC's `CallEvent`s, forwarding progress and
//! log messages to the caller's [`CallSink`], and the terminal event; the
//! input a call needs from the client and the capabilities it needs for it;
//! and the sealed `requestState` a 2026-07-28 client carries between rounds
//! (the edge keeps nothing between them).

mod io;
mod seal;

pub use io::*;
pub use seal::{StateError, StateSealer, now_secs};

use crate::backend::Backend;
use ithaca_kit::json;
use ithaca_kit::principal::{InternalKey, Principal};
use ithaca_proto::mcp::v1 as mcp;
use prost::Message;
use prost_reflect::{DynamicMessage, MethodDescriptor, ReflectMessage};
use serde_json::{Map, Value, json};
use std::time::Duration;
use tonic::Status;

/// How many rounds of input one legacy call may take before the edge gives
/// up on it (a service that never stops asking).
pub const MAX_ROUNDS: usize = 10;

/// The largest `state` a service may hand back with `input_required`.
pub const MAX_STATE_BYTES: usize = 16 * 1024;

/// The end of one streaming call.
#[derive(Debug)]
pub enum Terminal {
    /// A tool's result.
    Result(mcp::ToolContent),
    /// A tool's response message, encoded (its type is the tool's `result`
    /// option).
    Reply(Vec<u8>),
    /// A prompt's messages.
    Prompt(mcp::PromptReply),
    /// The service needs the client's answers first.
    Input(mcp::InputRequired),
}

/// Put the call context into `request`'s `CallContext` field, if it has
/// one (a service that never asks for input need not declare it).
pub fn fill_context(
    request: &mut DynamicMessage,
    context: &mcp::CallContext,
) -> Result<(), Status> {
    let descriptor = request.descriptor();
    let Some(field) = descriptor.fields().find(crate::schema::is_call_context) else {
        return Ok(());
    };
    let prost_reflect::Kind::Message(kind) = field.kind() else {
        return Ok(());
    };
    let value = DynamicMessage::decode(kind, context.encode_to_vec().as_slice())
        .map_err(|e| Status::internal(format!("building the call context: {e}")))?;
    request.set_field(&field, prost_reflect::Value::Message(value));
    Ok(())
}

/// The call context of one round.
pub fn context(
    client: ClientCaps,
    responses: Map<String, Value>,
    state: Vec<u8>,
) -> mcp::CallContext {
    let resumed = !responses.is_empty() || !state.is_empty();
    mcp::CallContext {
        client: Some(client.to_proto()),
        responses: responses
            .into_iter()
            .map(|(k, v)| (k, json::to_struct(v)))
            .collect(),
        state,
        resumed,
    }
}

/// Call a streaming RPC once: forward its progress and log events to
/// `sink` and return its terminal event. A status (the service's, or the
/// deadline's) is the call's failure.
pub async fn run_once(
    backend: &Backend,
    method: &MethodDescriptor,
    request: DynamicMessage,
    principal: &Principal,
    key: &InternalKey,
    deadline: Option<Duration>,
    sink: &dyn CallSink,
) -> Result<Terminal, Status> {
    let service = method.parent_service();
    let (mut stream, timeout) = backend
        .server_streaming(method, request, principal, key, deadline)
        .await?;
    let ends = tokio::time::Instant::now() + timeout;
    let mut last_progress: Option<f64> = None;
    loop {
        let message = match tokio::time::timeout_at(ends, stream.message()).await {
            Err(_) => return Err(backend.stream_timed_out(service.full_name(), timeout)),
            Ok(Err(status)) => {
                return Err(backend.explain_stream(service.full_name(), status, timeout));
            }
            Ok(Ok(None)) => {
                return Err(Status::internal(format!(
                    "{} ended its stream without a result",
                    method.full_name()
                )));
            }
            Ok(Ok(Some(message))) => message,
        };
        let event: mcp::CallEvent = message
            .transcode_to()
            .map_err(|e| Status::internal(format!("decoding a stream event: {e}")))?;
        match event.event {
            Some(mcp::call_event::Event::Progress(p)) => {
                // Progress must increase; a step back or a repeat is dropped.
                if last_progress.is_some_and(|last| p.progress <= last) || !p.progress.is_finite() {
                    continue;
                }
                last_progress = Some(p.progress);
                sink.notify(Notice::Progress {
                    progress: p.progress,
                    total: p.total.filter(|t| t.is_finite()),
                    message: (!p.message.is_empty()).then_some(p.message),
                })
                .await;
            }
            Some(mcp::call_event::Event::Log(log)) => {
                sink.notify(Notice::Log {
                    level: LogLevel::from_proto(log.level),
                    logger: (!log.logger.is_empty()).then_some(log.logger),
                    data: log.data.map_or(Value::Null, json::from_value),
                })
                .await;
            }
            // The terminal event ends the call; the edge reads no further.
            Some(mcp::call_event::Event::Result(result)) => return Ok(Terminal::Result(result)),
            Some(mcp::call_event::Event::Reply(reply)) => return Ok(Terminal::Reply(reply)),
            Some(mcp::call_event::Event::Prompt(prompt)) => return Ok(Terminal::Prompt(prompt)),
            Some(mcp::call_event::Event::InputRequired(input)) => {
                if input.state.len() > MAX_STATE_BYTES {
                    return Err(Status::internal(format!(
                        "{} returned {} bytes of state with input_required; at most {MAX_STATE_BYTES} are allowed",
                        method.full_name(),
                        input.state.len()
                    )));
                }
                if input.requests.is_empty() {
                    return Err(Status::internal(format!(
                        "{} answered input_required without a request",
                        method.full_name()
                    )));
                }
                return Ok(Terminal::Input(input));
            }
            None => {}
        }
    }
}

/// The answers and the service's state one round of a call starts from.
#[derive(Clone, Debug, Default)]
pub struct Round {
    pub responses: Map<String, Value>,
    pub state: Vec<u8>,
}

/// How a streaming call ended after all its rounds.
#[derive(Debug)]
pub enum Streamed {
    /// The terminal result, or the call's failure (as a status).
    Done(Result<Terminal, Status>),
    /// A 2026-07-28 call needs input: the `InputRequiredResult` JSON, with
    /// the service's state sealed into `requestState`.
    Input(Value),
    /// The service asked through a capability the client did not declare.
    MissingCapability(&'static str),
}

/// One streaming call and the rounds of input it takes.
pub struct Rounds<'a> {
    pub backend: &'a Backend,
    pub method: &'a MethodDescriptor,
    /// `tool:NAME` or `prompt:NAME`: what a sealed state is bound to.
    pub target: &'a str,
    pub principal: &'a Principal,
    pub key: &'a InternalKey,
    pub sealer: &'a StateSealer,
    pub deadline: Option<Duration>,
    pub io: &'a CallIo<'a>,
}

impl Rounds<'_> {
    /// Call the RPC from `round`; while it answers `input_required`, get
    /// the answers from a legacy client on the response stream and call it
    /// again, or hand the requests to a 2026-07-28 client (which retries).
    pub async fn run(&self, request: DynamicMessage, mut round: Round) -> Streamed {
        for _ in 0..MAX_ROUNDS {
            let mut message = request.clone();
            let context = context(self.io.client, round.responses, round.state);
            if let Err(status) = fill_context(&mut message, &context) {
                return Streamed::Done(Err(status));
            }
            let terminal = run_once(
                self.backend,
                self.method,
                message,
                self.principal,
                self.key,
                self.deadline,
                self.io.sink,
            )
            .await;
            let input = match terminal {
                Ok(Terminal::Input(input)) => input,
                other => return Streamed::Done(other),
            };
            round = match next_round(self.io, self.sealer, self.principal, self.target, input).await
            {
                Ok(next) => next,
                Err(end) => return end,
            };
        }
        Streamed::Done(Err(Status::internal(format!(
            "{} asked for input more than {MAX_ROUNDS} times in one call",
            self.method.full_name()
        ))))
    }
}

/// What follows a service's `input_required`: the next round, with the
/// answers a legacy client gave on its response stream; or the end of this
/// request: the sealed `input_required` a 2026-07-28 client retries from,
/// a capability the client lacks, or a failed question.
pub async fn next_round(
    io: &CallIo<'_>,
    sealer: &StateSealer,
    principal: &Principal,
    target: &str,
    input: mcp::InputRequired,
) -> Result<Round, Streamed> {
    let requests = requests_json(&input);
    if let Some(capability) = missing_capability(&requests, io.client) {
        return Err(Streamed::MissingCapability(capability));
    }
    if !io.asks_inline {
        let state = sealer.seal(principal, target, &input.state, now_secs());
        return Err(Streamed::Input(json!({
            "resultType": "input_required",
            "inputRequests": requests,
            "requestState": state,
        })));
    }
    match ask_inline(io.sink, requests).await {
        Ok(responses) => Ok(Round {
            responses,
            state: input.state,
        }),
        Err(error) => Err(Streamed::Done(Err(Status::failed_precondition(
            error.to_string(),
        )))),
    }
}

/// Ask a legacy client `requests` (`{method, params}` by key) on its
/// response stream, one after another: its results by key.
pub async fn ask_inline(
    sink: &dyn CallSink,
    requests: Map<String, Value>,
) -> Result<Map<String, Value>, AskError> {
    let mut responses = Map::new();
    for (key, request) in requests {
        let method = request["method"].as_str().unwrap_or(ROOTS).to_owned();
        let result = sink.ask(method, request["params"].clone()).await?;
        responses.insert(key, result);
    }
    Ok(responses)
}

/// The round a 2026-07-28 retry starts from: its `requestState` opened
/// (refused when it was changed, is another caller's or another target's,
/// or expired) and its `inputResponses` checked to be result objects.
pub fn open_retry(
    sealer: &StateSealer,
    caller: &Principal,
    target: &str,
    retry: &Retry,
) -> Result<Round, String> {
    let state = match &retry.request_state {
        None => Vec::new(),
        Some(value) => sealer
            .open(caller, target, value, now_secs())
            .map_err(|e| format!("{e}; call again without requestState to start over"))?,
    };
    let mut responses = Map::new();
    for (key, value) in retry.input_responses.iter().flatten() {
        if !value.is_object() {
            return Err(format!(
                "inputResponses.{key}: expected the client's result object for that request"
            ));
        }
        responses.insert(key.clone(), value.clone());
    }
    Ok(Round { responses, state })
}

/// The MCP requests of an `InputRequired`, by key: `{method, params}`
/// objects, in key order.
pub fn requests_json(input: &mcp::InputRequired) -> Map<String, Value> {
    let mut keys: Vec<&String> = input.requests.keys().collect();
    keys.sort();
    keys.into_iter()
        .map(|k| (k.clone(), request_json(&input.requests[k])))
        .collect()
}

fn request_json(request: &mcp::InputRequest) -> Value {
    use mcp::input_request::Kind;
    match &request.kind {
        Some(Kind::Elicitation(e)) => json!({
            "method": ELICIT,
            "params": {
                "message": e.message,
                "requestedSchema": e.requested_schema.clone().map_or_else(
                    || json!({"type": "object", "properties": {}}),
                    json::from_struct,
                ),
            },
        }),
        Some(Kind::Sampling(s)) => json!({
            "method": SAMPLE,
            "params": s.params.clone().map_or_else(|| json!({}), json::from_struct),
        }),
        Some(Kind::Roots(_)) | None => json!({"method": ROOTS, "params": {}}),
    }
}

/// The first capability `requests` need that `client` did not declare.
pub fn missing_capability(
    requests: &Map<String, Value>,
    client: ClientCaps,
) -> Option<&'static str> {
    requests
        .values()
        .filter_map(|r| r["method"].as_str())
        .find(|m| !client.allows(m))
        .map(capability_of)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_levels_order_and_parse() {
        assert!(LogLevel::Debug < LogLevel::Info && LogLevel::Error < LogLevel::Emergency);
        assert_eq!(LogLevel::parse("warning"), Some(LogLevel::Warning));
        assert_eq!(LogLevel::parse("verbose"), None);
        assert_eq!(LogLevel::from_proto(0), LogLevel::Info);
        assert_eq!(LogLevel::from_proto(99), LogLevel::Info);
    }

    #[test]
    fn a_request_for_an_undeclared_capability_is_named() {
        let input = mcp::InputRequired {
            requests: [
                (
                    "a".to_owned(),
                    mcp::InputRequest {
                        kind: Some(mcp::input_request::Kind::Sampling(mcp::Sampling::default())),
                    },
                ),
                (
                    "b".to_owned(),
                    mcp::InputRequest {
                        kind: Some(mcp::input_request::Kind::Roots(mcp::RootsRequest {})),
                    },
                ),
            ]
            .into_iter()
            .collect(),
            state: Vec::new(),
        };
        let requests = requests_json(&input);
        assert_eq!(requests["a"]["method"], json!("sampling/createMessage"));
        assert_eq!(requests["b"]["method"], json!("roots/list"));
        let only_roots = ClientCaps {
            roots: true,
            ..ClientCaps::default()
        };
        assert_eq!(missing_capability(&requests, only_roots), Some("sampling"));
        assert_eq!(missing_capability(&requests, ClientCaps::assumed()), None);
    }
}
