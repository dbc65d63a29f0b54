//! What the edge does for a request once the protocol layer has parsed it.
//! [`Core`] holds the catalog and the backends; its work is spread over the
//! modules that do it: [`crate::call`] (the tool pipeline, one stage a
//! file), [`crate::resources`] and [`crate::prompts`]. Nothing here knows
//! about HTTP or stdio.

use crate::appends::{Appends, Sent};
use crate::backend::Backend;
use crate::catalog::Catalog;
use crate::orphans::Orphans;
use crate::stream::StateSealer;
use ithaca_kit::error::{DomainCode, domain_code};
use ithaca_kit::json;
use ithaca_kit::principal::{InternalKey, Principal};
use ithaca_proto::service_names::SESSION;
use ithaca_proto::session::v1 as spb;
use ithaca_proto::session::v1::session_service_client::SessionServiceClient;
use prost_reflect::MethodDescriptor;
use serde_json::{Value, json};
use std::collections::HashMap;
use tonic::{Request, Status};

/// `SessionService.AppendEvent` and `BeginCall`, as the generated client
/// names them.
const APPEND_EVENT_PATH: &str = "/ithaca.session.v1.SessionService/AppendEvent";
const BEGIN_CALL_PATH: &str = "/ithaca.session.v1.SessionService/BeginCall";

/// What the edge reads of `AppendEvent`'s answer, a `TraceEvent`: its `seq`
/// (field 2) and nothing else. The answer also carries the event's payload,
/// which the edge has just sent; prost steps over the fields a message does
/// not declare without decoding them, so reading this instead of the whole
/// `TraceEvent` saves building that payload again (measured: 3 % of the
/// edge's heap allocations per call).
#[derive(Clone, PartialEq, prost::Message)]
struct Appended {
    #[prost(int64, tag = "2")]
    seq: i64,
}

/// What the edge reads of `BeginCall`'s answer (`CallBegun`): the
/// `tool_call`'s `seq` and, of the session, what the gate keeps (its id,
/// subject and notice). The title, times, status and URLs the full
/// `SessionDescriptor` also carries are stepped over undecoded (measured:
/// 2 % of the edge's heap allocations per call).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Begun {
    #[prost(message, optional, tag = "1")]
    pub session: Option<BegunSession>,
    #[prost(int64, tag = "2")]
    pub seq: i64,
}

/// The fields of a `SessionDescriptor` the gate reads, by their numbers.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct BegunSession {
    #[prost(string, tag = "1")]
    pub session_id: String,
    #[prost(string, optional, tag = "8")]
    pub subject_kind: Option<String>,
    #[prost(string, optional, tag = "9")]
    pub subject_id: Option<String>,
    #[prost(string, optional, tag = "11")]
    pub notice: Option<String>,
}

/// The request `_meta` key that pins a call to one session (by id) instead
/// of the key's current session: for a platform running two conversations
/// on one key.
pub const SESSION_PIN_META: &str = "io.ithaca/session_id";

/// The message agents get when they skip `session_context`.
pub use ithaca_proto::NO_ACTIVE_SESSION_MESSAGE as NO_SESSION_MESSAGE;

/// The `_meta` key of a result recorded in a session its caller joined
/// but did not open: `{"session_id", "notice"}`.
pub const SESSION_NOTICE_META: &str = "io.ithaca/session";

/// The deadline of one watch stream (`watch.proto`). A subscription
/// outlives it: the edge opens the watch again when it ends.
pub const WATCH_SPAN: std::time::Duration = std::time::Duration::from_secs(3600);

/// Every JSON-RPC error code the edge answers with, by name: the ones the
/// HTTP front gives itself and the ones a call's handling gives.
pub mod codes {
    pub const PARSE_ERROR: i32 = -32700;
    pub const INVALID_REQUEST: i32 = -32600;
    pub const METHOD_NOT_FOUND: i32 = -32601;
    pub const INVALID_PARAMS: i32 = -32602;
    pub const INTERNAL_ERROR: i32 = -32603;
    /// 2026-07-28's MissingRequiredClientCapability.
    pub const MISSING_CAPABILITY: i32 = -32021;
    /// 2026-07-28's UnsupportedProtocolVersion.
    pub const UNSUPPORTED_PROTOCOL_VERSION: i32 = -32022;
}

/// A JSON-RPC level failure (not a tool result).
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i32,
    pub message: String,
    pub data: Option<Value>,
}

impl RpcError {
    pub const INVALID_PARAMS: i32 = codes::INVALID_PARAMS;
    pub const INTERNAL: i32 = codes::INTERNAL_ERROR;
    pub const MISSING_CAPABILITY: i32 = codes::MISSING_CAPABILITY;

    /// A call needs a client capability the request did not declare.
    pub fn missing_capability(capability: &str) -> Self {
        RpcError {
            code: Self::MISSING_CAPABILITY,
            message: format!(
                "this call needs the client's {capability} capability, which the request did not declare"
            ),
            data: Some(json!({"requiredCapabilities": {capability: {}}})),
        }
    }

    pub fn invalid_params(message: impl Into<String>, data: Option<Value>) -> Self {
        RpcError {
            code: Self::INVALID_PARAMS,
            message: message.into(),
            data,
        }
    }

    /// A backend failed a read or a prompt: logged, and its typed code
    /// passed on.
    pub fn internal(status: &Status) -> Self {
        tracing::warn!(code = ?status.code(), error = %status.message(), "backend call failed");
        RpcError {
            code: Self::INTERNAL,
            message: status.message().to_owned(),
            data: Some(json!({"error": error_code(status)})),
        }
    }
}

/// The typed code of a failed backend call.
pub fn error_code(status: &Status) -> String {
    if let Some(domain) = domain_code(status) {
        return domain.to_owned();
    }
    // The table's generic code of the status (DomainCode::from_grpc).
    DomainCode::from_grpc(status.code()).mcp().code.to_owned()
}

/// How a tool call or a prompt ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// The result (`CallToolResult` or `GetPromptResult` JSON).
    Complete(Value),
    /// A 2026-07-28 client must answer these requests and call again: the
    /// `InputRequiredResult` JSON.
    InputRequired(Value),
}

/// The edge's view of the backends.
pub struct Core {
    pub catalog: Catalog,
    /// Backend of each gRPC service, by fully qualified service name.
    pub(crate) routes: HashMap<String, Backend>,
    pub(crate) key: InternalKey,
    /// The session service, when there is one: it gates tools and keeps
    /// their trace. Without it (a bare fixture backend) tools run ungated.
    pub(crate) session: Option<Backend>,
    /// The session service's append stream (`AppendEvents`).
    pub(crate) appends: Option<Appends>,
    /// Calls whose result could not be recorded, to report when it can.
    pub(crate) orphans: Orphans,
    /// Seals the state a 2026-07-28 client carries between input rounds.
    pub(crate) sealer: StateSealer,
}

impl Core {
    pub fn new(catalog: Catalog, routes: HashMap<String, Backend>, key: InternalKey) -> Self {
        let session = routes.get(SESSION).cloned();
        let sealer = StateSealer::new(&key);
        let appends = session.clone().map(|s| Appends::new(s, key.clone()));
        Core {
            catalog,
            routes,
            key,
            session,
            appends,
            orphans: Orphans::default(),
            sealer,
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

    /// The backend serving `method`'s service.
    pub(crate) fn backend(&self, method: &MethodDescriptor) -> Result<&Backend, Status> {
        let service = method.parent_service();
        self.routes.get(service.full_name()).ok_or_else(|| {
            Status::unavailable(format!("no backend serves {}", service.full_name()))
        })
    }

    /// Append one event to a session's trace on behalf of `principal`.
    pub async fn append(
        &self,
        principal: &Principal,
        session_id: &str,
        kind: spb::EventType,
        payload: Value,
    ) -> Result<i64, Status> {
        let (Some(session), Some(appends)) = (&self.session, &self.appends) else {
            return Err(Status::unavailable("no session service"));
        };
        // Every server of the stream reads `payload_json`: the JSON text
        // the trace stores, with no Struct built on either side.
        let streamed = spb::AppendEventRequest {
            session_id: session_id.to_owned(),
            r#type: kind as i32,
            payload: None,
            payload_json: serde_json::to_vec(&payload)
                .map_err(|e| Status::internal(format!("an event payload as JSON: {e}")))?,
        };
        match appends.append(principal, streamed).await {
            Sent::Done(appended) => return appended,
            Sent::Unary => {}
        }
        // A session service of the previous release: a Struct, which
        // every release reads.
        let mut request = Request::new(spb::AppendEventRequest {
            session_id: session_id.to_owned(),
            r#type: kind as i32,
            payload: Some(json::to_struct(payload)),
            payload_json: Vec::new(),
        });
        request.set_timeout(session.timeout());
        self.key.sign(&mut request, principal);
        // Boxed: a rare path, kept out of the size of every append's future
        // (see `call::invoke::run`).
        let appended: Appended = Box::pin(slim_unary(
            session,
            "AppendEvent",
            APPEND_EVENT_PATH,
            request,
        ))
        .await?;
        Ok(appended.seq)
    }

    /// `BeginCall`, its answer read as [`Begun`].
    pub(crate) async fn begin_call(
        &self,
        session: &Backend,
        principal: &Principal,
        mut request: Request<spb::BeginCallRequest>,
    ) -> Result<Begun, Status> {
        request.set_timeout(session.timeout());
        self.key.sign(&mut request, principal);
        slim_unary(session, "BeginCall", BEGIN_CALL_PATH, request).await
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

    /// A 32-byte key for `purpose`, derived from the internal key every
    /// replica shares (as the request-state sealer's is).
    pub fn derive_key(&self, purpose: &str) -> [u8; 32] {
        self.key.derive(purpose)
    }
}

/// One unary call of the session service on the generated client's path
/// (`path`, method `method`), its answer decoded as `R`: a message that
/// declares only the fields the edge reads, so prost steps over the rest.
/// The RPC is unchanged for every other client.
async fn slim_unary<Q, R>(
    session: &Backend,
    method: &'static str,
    path: &'static str,
    mut request: Request<Q>,
) -> Result<R, Status>
where
    Q: prost::Message + Send + Sync + 'static,
    R: prost::Message + Default + Send + Sync + 'static,
{
    let mut grpc = tonic::client::Grpc::new(session.channel());
    request
        .extensions_mut()
        .insert(tonic::GrpcMethod::new(SESSION, method));
    let call = async move {
        grpc.ready()
            .await
            .map_err(|e| Status::unknown(format!("session service not ready: {e}")))?;
        let path = http::uri::PathAndQuery::from_static(path);
        grpc.unary(request, path, tonic_prost::ProstCodec::default())
            .await
    };
    session.typed(SESSION, None, call).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn begun_reads_the_seq_and_what_the_gate_keeps_of_the_session() {
        let begun = spb::CallBegun {
            session: Some(spb::SessionDescriptor {
                session_id: "ses_1".into(),
                tenant_id: "ten_1".into(),
                title: "a title".into(),
                created_at: "2026-12-06T00:00:00Z".into(),
                status: "open".into(),
                trace_resource: "doomberg://sessions/ses_1/trace".into(),
                subject_kind: Some("filter".into()),
                subject_id: Some("flt_1".into()),
                notice: Some("moved".into()),
                ..Default::default()
            }),
            seq: 7,
        };
        let read = Begun::decode(begun.encode_to_vec().as_slice()).expect("decodes");
        assert_eq!(read.seq, 7);
        let session = read.session.expect("a session");
        assert_eq!(session.session_id, "ses_1");
        assert_eq!(session.subject_kind.as_deref(), Some("filter"));
        assert_eq!(session.subject_id.as_deref(), Some("flt_1"));
        assert_eq!(session.notice.as_deref(), Some("moved"));
        // Absent optional fields stay absent.
        let bare = spb::CallBegun {
            session: Some(spb::SessionDescriptor {
                session_id: "ses_2".into(),
                ..Default::default()
            }),
            seq: 1,
        };
        let read = Begun::decode(bare.encode_to_vec().as_slice()).expect("decodes");
        assert_eq!(read.session.expect("a session").subject_kind, None);
    }

    #[test]
    fn appended_reads_the_seq_of_a_whole_trace_event() {
        let event = spb::TraceEvent {
            session_id: "ses_1".into(),
            seq: 42,
            r#type: "tool_result".into(),
            payload: Some(json::to_struct(
                json!({"name": "bench_ping", "n": [1, 2, 3]}),
            )),
            created_at: "2026-12-06T00:00:00Z".into(),
            trace_id: "0af7651916cd43dd8448eb211c80319c".into(),
        };
        let appended = Appended::decode(event.encode_to_vec().as_slice()).expect("decodes");
        assert_eq!(appended.seq, 42);
    }

    #[test]
    fn the_append_path_is_the_generated_clients() {
        // The generated client's path, spelled from the service's full name.
        assert_eq!(APPEND_EVENT_PATH, format!("/{SESSION}/AppendEvent"));
        assert_eq!(BEGIN_CALL_PATH, format!("/{SESSION}/BeginCall"));
    }
}
