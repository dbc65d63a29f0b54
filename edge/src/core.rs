//! What the edge does for a request once the protocol layer has parsed it:
//! tool calls (gate, trace, transcoding, the backend hop, error mapping),
//! resource reads and prompts. Nothing here knows about HTTP or stdio.

use crate::backend::Backend;
use crate::catalog::{self, Catalog, Resource, Tool};
use crate::transcode;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ithaca_kit::error::domain_code;
use ithaca_kit::json;
use ithaca_kit::principal::{Actor, InternalKey, Principal};
use ithaca_proto::mcp::v1 as mcp;
use ithaca_proto::mcp::v1::content::Kind as ContentKind;
use ithaca_proto::service_names::SESSION;
use ithaca_proto::session::v1 as spb;
use ithaca_proto::session::v1::session_service_client::SessionServiceClient;
use prost_reflect::{DynamicMessage, MethodDescriptor, ReflectMessage};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::time::Instant;
use tonic::{Code, Request, Status};

/// The message agents get when they skip `session_context`.
pub use ithaca_proto::NO_ACTIVE_SESSION_MESSAGE as NO_SESSION_MESSAGE;

/// A JSON-RPC level failure (not a tool result).
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i32,
    pub message: String,
    pub data: Option<Value>,
}

impl RpcError {
    pub const INVALID_PARAMS: i32 = -32602;
    pub const INTERNAL: i32 = -32603;

    pub fn invalid_params(message: impl Into<String>, data: Option<Value>) -> Self {
        RpcError {
            code: Self::INVALID_PARAMS,
            message: message.into(),
            data,
        }
    }
}

/// The edge's view of the backends.
pub struct Core {
    pub catalog: Catalog,
    /// Backend of each gRPC service, by fully qualified service name.
    routes: HashMap<String, Backend>,
    key: InternalKey,
    /// The session service, when there is one: it gates tools and keeps
    /// their trace. Without it (a bare fixture backend) tools run ungated.
    session: Option<Backend>,
}

impl Core {
    pub fn new(catalog: Catalog, routes: HashMap<String, Backend>, key: InternalKey) -> Self {
        let session = routes.get(ithaca_proto::service_names::SESSION).cloned();
        Core {
            catalog,
            routes,
            key,
            session,
        }
    }

    /// Every backend, deduplicated by URL, for readiness checks.
    pub fn backends(&self) -> Vec<Backend> {
        let mut seen = Vec::<Backend>::new();
        for b in self.routes.values() {
            if !seen.iter().any(|s| s.url == b.url) {
                seen.push(b.clone());
            }
        }
        seen
    }

    /// Whether `caller` may see and call `tool`: scopes, human-only, and the
    /// session subject of subject-scoped write tools.
    pub fn offered(&self, caller: &Principal, tool: &Tool) -> bool {
        let scoped =
            caller.actor() == Actor::System || tool.scopes().iter().all(|s| caller.has_scope(s));
        let human_ok = !tool.options.human_only || caller.actor() != Actor::Agent;
        // Subject-scoped write tools need a session opened from their subject;
        // no session carries a subject yet, so they are never offered.
        let subject_ok = tool.options.subject_kind.is_empty();
        scoped && human_ok && subject_ok
    }

    /// The tools `caller` is offered.
    pub fn tools_for<'a>(&'a self, caller: &'a Principal) -> impl Iterator<Item = &'a Tool> + 'a {
        self.catalog
            .tools
            .iter()
            .filter(move |t| self.offered(caller, t))
    }

    fn backend(&self, method: &MethodDescriptor) -> Result<&Backend, Status> {
        let service = method.parent_service();
        self.routes.get(service.full_name()).ok_or_else(|| {
            Status::unavailable(format!("no backend serves {}", service.full_name()))
        })
    }

    /// Run one tool call and return the `CallToolResult` JSON.
    pub async fn call_tool(
        &self,
        caller: &Principal,
        name: &str,
        arguments: Option<Value>,
    ) -> Result<Value, RpcError> {
        let Some(tool) = self.catalog.tool(name).filter(|t| self.offered(caller, t)) else {
            // A tool the caller may not use looks exactly like a missing one.
            return Err(RpcError::invalid_params(
                format!("unknown tool: {name}"),
                Some(json!({"tool": name})),
            ));
        };
        let started = Instant::now();
        let mut principal = caller.clone();
        let arguments_seen = transcode::traceable(arguments.clone().unwrap_or(json!({})));

        if !tool.options.session_exempt
            && let Some(session) = &self.session
        {
            match self.current_session(session, caller).await {
                Ok(id) => principal = principal.in_session(Some(id)),
                Err(failure) => return Ok(failure.to_result()),
            }
        }
        if let Some(session_id) = principal.session_id().map(str::to_owned) {
            let payload = json!({"name": name, "arguments": arguments_seen});
            if let Err(status) = self
                .append(&principal, &session_id, spb::EventType::ToolCall, payload)
                .await
            {
                if domain_code(&status) == Some("SESSION_NOT_OPEN") {
                    return Ok(no_session().to_result());
                }
                return Ok(status_failure(&status).to_result());
            }
        }

        let outcome = self.invoke(tool, &principal, arguments).await;

        // session_context opened (or joined) a session: record the call in it.
        let session_id = match (principal.session_id(), &outcome) {
            (Some(id), _) => Some(id.to_owned()),
            (None, Ok(result)) if tool.options.session_exempt => {
                result["structuredContent"]["session_id"]
                    .as_str()
                    .map(str::to_owned)
            }
            _ => None,
        };
        if let (Some(session_id), Some(_)) = (session_id, &self.session) {
            principal = principal.in_session(Some(session_id.clone()));
            if tool.options.session_exempt {
                let payload = json!({"name": name, "arguments": arguments_seen});
                let _ = self
                    .append(&principal, &session_id, spb::EventType::ToolCall, payload)
                    .await;
            }
            let payload = json!({
                "name": name,
                "outcome": if outcome.is_ok() { "ok" } else { "error" },
                "duration_ms": started.elapsed().as_millis() as u64,
                "provenance": {
                    "service": tool.method.parent_service().full_name(),
                    "method": tool.method.name(),
                    "trace_id": ithaca_kit::propagation::current_trace_id(),
                },
                "error": outcome.as_ref().err().map_or(Value::Null, |f| json!(f.code)),
            });
            if let Err(status) = self
                .append(&principal, &session_id, spb::EventType::ToolResult, payload)
                .await
            {
                tracing::warn!(error = %status.message(), tool = name, "recording tool_result failed");
            }
        }
        Ok(match outcome {
            Ok(result) => result,
            Err(failure) => failure.to_result(),
        })
    }

    /// Transcode, call the backend, render the result.
    async fn invoke(
        &self,
        tool: &Tool,
        principal: &Principal,
        arguments: Option<Value>,
    ) -> Result<Value, ToolFailure> {
        let request = transcode::to_message(&tool.method.input(), arguments)
            .map_err(|e| ToolFailure::new("INVALID_ARGUMENT", &e.message, false))?;
        let backend = self.backend(&tool.method).map_err(|s| status_failure(&s))?;
        let response = backend
            .unary_within(&tool.method, request, principal, &self.key, tool.deadline())
            .await
            .map_err(|s| status_failure(&s))?;
        Ok(render_tool_result(&response))
    }

    async fn current_session(
        &self,
        session: &Backend,
        caller: &Principal,
    ) -> Result<String, ToolFailure> {
        let mut client = SessionServiceClient::new(session.channel());
        let mut request = Request::new(spb::GetCurrentSessionRequest {});
        request.set_timeout(session.timeout());
        self.key.sign(&mut request, caller);
        match client.get_current_session(request).await {
            Ok(reply) => Ok(reply.into_inner().session_id),
            Err(status) if domain_code(&status) == Some("NO_ACTIVE_SESSION") => Err(no_session()),
            Err(status) => Err(status_failure(&session.explain(SESSION, status))),
        }
    }

    /// Append one event to a session's trace on behalf of `principal`.
    pub async fn append(
        &self,
        principal: &Principal,
        session_id: &str,
        kind: spb::EventType,
        payload: Value,
    ) -> Result<spb::TraceEvent, Status> {
        let Some(session) = &self.session else {
            return Err(Status::unavailable("no session service"));
        };
        let mut client = SessionServiceClient::new(session.channel());
        let mut request = Request::new(spb::AppendEventRequest {
            session_id: session_id.to_owned(),
            r#type: kind as i32,
            payload: Some(json::to_struct(payload)),
        });
        request.set_timeout(session.timeout());
        self.key.sign(&mut request, principal);
        client
            .append_event(request)
            .await
            .map(tonic::Response::into_inner)
            .map_err(|status| session.explain(SESSION, status))
    }

    /// A client of the session service (the SSE stream uses it); sign each
    /// request with [`Core::sign`].
    pub fn session_client(&self) -> Option<SessionServiceClient<tonic::transport::Channel>> {
        self.session
            .as_ref()
            .map(|s| SessionServiceClient::new(s.channel()))
    }

    /// Sign a request for `principal`.
    pub fn sign<T>(&self, request: &mut Request<T>, principal: &Principal) {
        self.key.sign(request, principal);
    }

    /// Read a resource: the `ReadResourceResult` JSON.
    pub async fn read_resource(&self, caller: &Principal, uri: &str) -> Result<Value, RpcError> {
        let not_found = || {
            RpcError::invalid_params(
                format!("resource not found: {uri}"),
                Some(json!({"uri": uri})),
            )
        };
        let Some((resource, vars)) = self.catalog.resource(uri) else {
            return Err(not_found());
        };
        if !resource.scopes().iter().all(|s| caller.has_scope(s)) && caller.actor() != Actor::System
        {
            return Err(not_found());
        }
        let args: serde_json::Map<String, Value> = vars
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect();
        let request = transcode::to_message(&resource.method.input(), Some(Value::Object(args)))
            .map_err(|e| RpcError::invalid_params(e.message, Some(json!({"uri": uri}))))?;
        let backend = self.backend(&resource.method).map_err(|s| internal(&s))?;
        match backend
            .unary(&resource.method, request, caller, &self.key)
            .await
        {
            Ok(response) => Ok(render_resource(resource, uri, &response)),
            Err(status) if matches!(status.code(), Code::NotFound | Code::InvalidArgument) => {
                Err(not_found())
            }
            Err(status) => Err(internal(&status)),
        }
    }

    /// Get a prompt: the `GetPromptResult` JSON.
    pub async fn get_prompt(
        &self,
        caller: &Principal,
        name: &str,
        arguments: Option<Value>,
    ) -> Result<Value, RpcError> {
        let Some(prompt) = self.catalog.prompt(name) else {
            return Err(RpcError::invalid_params(
                format!("unknown prompt: {name}"),
                Some(json!({"prompt": name})),
            ));
        };
        let request = transcode::to_message(&prompt.method.input(), arguments)
            .map_err(|e| RpcError::invalid_params(e.message, None))?;
        let backend = self.backend(&prompt.method).map_err(|s| internal(&s))?;
        let response = backend
            .unary(&prompt.method, request, caller, &self.key)
            .await
            .map_err(|s| internal(&s))?;
        let reply: mcp::PromptReply = response.transcode_to().map_err(|e| RpcError {
            code: RpcError::INTERNAL,
            message: format!("prompt reply: {e}"),
            data: None,
        })?;
        let messages: Vec<Value> = reply
            .messages
            .into_iter()
            .map(|m| json!({"role": m.role, "content": m.content.map(content_block).unwrap_or(json!({"type": "text", "text": ""}))}))
            .collect();
        let mut result = json!({"messages": messages});
        if !reply.description.is_empty() {
            result["description"] = json!(reply.description);
        }
        Ok(result)
    }
}

fn internal(status: &Status) -> RpcError {
    tracing::warn!(code = ?status.code(), error = %status.message(), "backend call failed");
    RpcError {
        code: RpcError::INTERNAL,
        message: status.message().to_owned(),
        data: Some(json!({"error": error_code(status)})),
    }
}

/// A tool that failed: what the agent is told, and what the trace records.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolFailure {
    /// A typed code (`no_active_session`, `NOT_FOUND`, a domain code).
    pub code: String,
    pub message: String,
    /// Whether the same call may succeed if tried again later.
    pub retryable: bool,
}

impl ToolFailure {
    pub fn new(code: &str, message: &str, retryable: bool) -> Self {
        ToolFailure {
            code: code.to_owned(),
            message: message.to_owned(),
            retryable,
        }
    }

    /// The `{"error": CODE, "message": …}` body agents read.
    pub fn body(&self) -> Value {
        let mut body = json!({"error": self.code, "message": self.message});
        if self.retryable {
            body["retryable"] = json!(true);
        }
        body
    }

    /// The `CallToolResult` JSON: the body as text content and no
    /// `structuredContent`, because a tool's output schema describes its
    /// success and clients (the Node SDK 1.x among them) validate structured
    /// content even on errors.
    pub fn to_result(&self) -> Value {
        json!({
            "content": [{"type": "text", "text": self.body().to_string()}],
            "isError": true,
        })
    }
}

/// The typed code of a failed backend call.
pub fn error_code(status: &Status) -> String {
    if let Some(domain) = domain_code(status) {
        return domain.to_owned();
    }
    match status.code() {
        Code::InvalidArgument | Code::OutOfRange => "INVALID_ARGUMENT",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::Unauthenticated => "AUTH_REQUIRED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Unavailable => "SERVICE_UNAVAILABLE",
        // The edge cancels a call only when its deadline passes (tonic
        // reports a server-side `grpc-timeout` as CANCELLED "Timeout
        // expired"), so both are timeouts.
        Code::DeadlineExceeded | Code::Cancelled => "TIMEOUT",
        Code::ResourceExhausted => "RATE_LIMITED",
        _ => "INTERNAL",
    }
    .to_owned()
}

fn status_failure(status: &Status) -> ToolFailure {
    let retryable = matches!(
        status.code(),
        Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::ResourceExhausted
    );
    let code = error_code(status);
    if code == "INTERNAL" {
        tracing::warn!(code = ?status.code(), error = %status.message(), "backend failed");
    }
    let message = match status.code() {
        Code::Internal | Code::Unknown => "the service failed; see the server logs",
        _ => status.message(),
    };
    ToolFailure::new(&code, message, retryable)
}

fn no_session() -> ToolFailure {
    ToolFailure::new("no_active_session", NO_SESSION_MESSAGE, false)
}

/// A successful tool response as `CallToolResult` JSON.
fn render_tool_result(response: &DynamicMessage) -> Value {
    if response.descriptor().full_name() == catalog::CONTENT_MESSAGE
        && let Ok(content) = response.transcode_to::<mcp::ToolContent>()
    {
        let blocks: Vec<Value> = content.content.into_iter().map(content_block).collect();
        let mut result = json!({"content": blocks, "isError": false});
        if let Some(structured) = content.structured {
            result["structuredContent"] = json::from_struct(structured);
        }
        return result;
    }
    let structured = transcode::to_json(response);
    json!({
        "content": [{"type": "text", "text": structured.to_string()}],
        "structuredContent": structured,
        "isError": false,
    })
}

/// One MCP content block.
fn content_block(content: mcp::Content) -> Value {
    match content.kind {
        Some(ContentKind::Text(t)) => json!({"type": "text", "text": t.text}),
        Some(ContentKind::Image(b)) => {
            json!({"type": "image", "data": STANDARD.encode(&b.data), "mimeType": b.mime_type})
        }
        Some(ContentKind::Audio(b)) => {
            json!({"type": "audio", "data": STANDARD.encode(&b.data), "mimeType": b.mime_type})
        }
        Some(ContentKind::Resource(r)) => json!({"type": "resource", "resource": embedded(&r)}),
        None => json!({"type": "text", "text": ""}),
    }
}

fn embedded(r: &mcp::EmbeddedResource) -> Value {
    let mut v = json!({"uri": r.uri});
    if !r.mime_type.is_empty() {
        v["mimeType"] = json!(r.mime_type);
    }
    match &r.body {
        Some(mcp::embedded_resource::Body::Blob(b)) => v["blob"] = json!(STANDARD.encode(b)),
        Some(mcp::embedded_resource::Body::Text(t)) => v["text"] = json!(t),
        None => v["text"] = json!(""),
    }
    v
}

/// A resource response as `ReadResourceResult` JSON.
fn render_resource(resource: &Resource, uri: &str, response: &DynamicMessage) -> Value {
    if response.descriptor().full_name() == catalog::CONTENT_MESSAGE
        && let Ok(content) = response.transcode_to::<mcp::ToolContent>()
    {
        let contents: Vec<Value> = content
            .content
            .into_iter()
            .map(|c| match c.kind {
                Some(ContentKind::Resource(r)) => embedded(&r),
                Some(ContentKind::Image(b) | ContentKind::Audio(b)) => {
                    json!({"uri": uri, "mimeType": b.mime_type, "blob": STANDARD.encode(&b.data)})
                }
                Some(ContentKind::Text(t)) => {
                    json!({"uri": uri, "mimeType": resource.mime_type, "text": t.text})
                }
                None => json!({"uri": uri, "mimeType": resource.mime_type, "text": ""}),
            })
            .collect();
        return json!({"contents": contents});
    }
    let body = transcode::to_json(response);
    json!({"contents": [{"uri": uri, "mimeType": resource.mime_type, "text": body.to_string()}]})
}
