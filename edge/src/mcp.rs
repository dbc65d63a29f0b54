//! The MCP protocol face of the edge, on the official Rust SDK (`rmcp`).
//!
//! `rmcp` does the wire for both eras: 2026-07-28 (`server/discover`, the
//! required `_meta`, header/body validation, `resultType`, its error codes)
//! and the `initialize` profile, statelessly (no `Mcp-Session-Id`). This
//! handler fills in what only Ithaca knows: the catalog, per-caller filtering,
//! cache hints and the tool pipeline of [`crate::core`]. What `rmcp` does not
//! do the way we need (parse and batch errors, scopes, authentication,
//! Host/Origin) happens in the HTTP layer before it (see `http.rs`).

use crate::core::{Answer, Core, RpcError};
use crate::relay::{Asker, Asks, LogLevels, RequestSink};
pub use crate::revoked::Revoked;
use crate::schema;
use crate::stream::{CallIo, ClientCaps, LogLevel, Retry};
use crate::subscribe::{Deliver, Subscriptions};
use ithaca_kit::principal::Principal;
use rmcp::model::SubscriptionFilter;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, DiscoverResult, ErrorCode,
    GetPromptRequestParams, GetPromptResponse, GetPromptResult, InitializeResult,
    InputRequiredResult, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams,
    ReadResourceResponse, ReadResourceResult, ServerCapabilities, Tool,
};
use rmcp::service::{RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::borrow::Cow;
use std::sync::Arc;
use tracing::Instrument;

/// Protocol revisions served, oldest first: every revision a deployed
/// client still speaks (Python `mcp` 1.9 and the Node SDK 1.11 offer
/// 2025-03-26; older hosts 2024-11-05).
pub const VERSIONS: &[ProtocolVersion] = &[
    ProtocolVersion::V_2024_11_05,
    ProtocolVersion::V_2025_03_26,
    ProtocolVersion::V_2025_06_18,
    ProtocolVersion::V_2025_11_25,
    ProtocolVersion::V_2026_07_28,
];

/// The first revision without `initialize` (revisions compare as strings).
pub const NO_INITIALIZE_FROM: &str = "2026-07-28";

/// The served revisions without `initialize`: what `server/discover`
/// advertises.
pub fn modern_versions() -> Vec<String> {
    VERSIONS
        .iter()
        .map(|v| v.to_string())
        .filter(|v| v.as_str() >= NO_INITIALIZE_FROM)
        .collect()
}

/// The request `_meta` key of 2026-07-28 that asks for log messages.
pub const LOG_LEVEL_META: &str = "io.modelcontextprotocol/logLevel";

/// How long list results may be cached by a client.
const LIST_TTL_MS: u64 = 60_000;
/// How long discovery may be cached.
const DISCOVER_TTL_MS: u64 = 3_600_000;

/// What agents are told about using Ithaca (initialize and server/discover).
pub const INSTRUCTIONS: &str = "\
Ithaca is a research platform. Work in this order:
1. Call session_context first, with the user's request as `prompt` (and `session_id` to continue \
an earlier session). Every other tool refuses to run without an open session, and everything you \
do afterwards is recorded in that session's trace, which people can watch live.
2. Discover before you act: search_skills and describe_skill show what can be computed; the \
doomberg:// resources show data, runs and policy.
3. Read data and run analyses; cite the run or resource you used.
4. Anything that writes, trades or costs money may be refused by policy or wait for a person's \
approval; report a pending approval instead of retrying it.
5. Close the session with session_close when the work is done.
Broker filters (astronomy alerts) have four rules the schemas cannot show:
- The stream bounds what a filter sees: a cut on a field the filter's stream does not carry passes \
nothing; such cuts come back as warnings, so read them.
- Call get_alert_schema before writing a pipeline: every path must exist in the survey's schema \
(nullable fields end in ?, arrays in []); a misspelt path is refused with the nearest real one.
- Activation is gated: activate_broker_filter_version needs a passing verdict \
(post_broker_filter_version returns it) and a preview of that exact pipeline with \
run_broker_filter in this session; an agent's activation then waits for a person's approval.
- Start from get_counterpart_search_defaults (a copy of the standard ZTF quality cuts and time \
window, with sort_order Ascending to keep the alerts nearest the trigger) rather than writing cuts \
from nothing.
Write tools for a filter or a GCN event are offered only in a session a person opened on that \
object; join it with session_context and its session_id.";

/// The session a request pins itself to with `_meta`
/// [`crate::core::SESSION_PIN_META`], if it does; anything but a string is
/// refused.
fn session_pin(ctx: &RequestContext<RoleServer>) -> Result<Option<String>, ErrorData> {
    match ctx.meta.get(crate::core::SESSION_PIN_META) {
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

/// The MCP handler. Cheap to clone.
#[derive(Clone)]
pub struct Gateway {
    core: Arc<Core>,
    /// The principal of a stdio session (no authentication there).
    fixed: Option<Principal>,
    version: String,
    /// Legacy HTTP clients' answers to requests made during a call; the
    /// HTTP layer delivers them ([`Gateway::asks`]).
    asks: Arc<Asks>,
    /// The level each legacy caller set with `logging/setLevel`.
    levels: Arc<LogLevels>,
    /// Legacy resource subscriptions (and, over HTTP, the GET streams
    /// their updates go to).
    subscriptions: Arc<Subscriptions>,
}

impl Gateway {
    /// A gateway for HTTP, where each request carries its caller.
    pub fn http(core: Arc<Core>) -> Self {
        Gateway {
            subscriptions: Subscriptions::new(core.clone()),
            core,
            fixed: None,
            version: env!("CARGO_PKG_VERSION").to_owned(),
            asks: Arc::default(),
            levels: Arc::default(),
        }
    }

    /// A gateway for stdio, acting for `principal` throughout.
    pub fn stdio(core: Arc<Core>, principal: Principal) -> Self {
        Gateway {
            subscriptions: Subscriptions::new(core.clone()),
            core,
            fixed: Some(principal),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            asks: Arc::default(),
            levels: Arc::default(),
        }
    }

    /// The same gateway taking legacy answers through `asks` (one whose
    /// ids name this replica, `relay.rs`).
    pub fn with_asks(mut self, asks: Arc<Asks>) -> Self {
        self.asks = asks;
        self
    }

    /// Where the HTTP layer delivers legacy clients' answers.
    pub fn asks(&self) -> Arc<Asks> {
        self.asks.clone()
    }

    /// The legacy subscriptions, whose updates the HTTP layer's GET
    /// streams carry.
    pub fn subscriptions(&self) -> Arc<Subscriptions> {
        self.subscriptions.clone()
    }

    /// Where a legacy subscription's updates go: the stdio session's peer,
    /// or the caller's GET streams over HTTP.
    fn deliver(&self, ctx: &RequestContext<RoleServer>) -> Deliver {
        match self.fixed {
            Some(_) => Deliver::Peer(ctx.peer.clone()),
            None => Deliver::Streams,
        }
    }

    /// How a request's call reaches its client while it runs: the sink for
    /// its notices and input requests, the client's capabilities, and
    /// whether it answers on the response stream (legacy) or by retrying
    /// (2026-07-28, whose answers and state `retry` holds).
    fn call_io(
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

    fn caller(&self, ctx: &RequestContext<RoleServer>) -> Result<CallerInfo, ErrorData> {
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

    fn server_info(&self) -> Value {
        json!({"name": "ithaca", "title": "Ithaca", "version": self.version})
    }

    /// A result object with the cache hints and `serverInfo` of 2026-07-28.
    fn result<T: DeserializeOwned>(
        &self,
        mut body: Value,
        ttl_ms: u64,
        scope: &str,
    ) -> Result<T, ErrorData> {
        body["resultType"] = json!("complete");
        body["ttlMs"] = json!(ttl_ms);
        body["cacheScope"] = json!(scope);
        body["_meta"] = json!({"io.modelcontextprotocol/serverInfo": self.server_info()});
        serde_json::from_value(body)
            .map_err(|e| ErrorData::internal_error(format!("building result: {e}"), None))
    }

    /// The catalog's resources (`templates` false) or its resource
    /// templates, under `field` of a list result.
    fn resource_list<T: DeserializeOwned>(
        &self,
        field: &str,
        templates: bool,
    ) -> Result<T, ErrorData> {
        let listed: Vec<Value> = self
            .core
            .catalog
            .resources
            .iter()
            .filter(|r| r.is_template() == templates)
            .map(|r| r.to_json())
            .collect();
        self.result(json!({ field: listed }), LIST_TTL_MS, "private")
    }
}

/// Whether `version` has structured tool output (`structuredContent`,
/// `outputSchema`, tool `title`), which arrived in 2025-06-18. Revisions are
/// dates, so they compare as strings.
fn has_structured_output(version: Option<&ProtocolVersion>) -> bool {
    // A request that names no version over HTTP is 2025-03-26 by the
    // spec's rule; rmcp reports that as the version too.
    version.is_none_or(|v| v.as_str() >= ProtocolVersion::V_2025_06_18.as_str())
}

/// Whether `version` reads a schema without `$schema` as JSON Schema
/// 2020-12, as the revisions since 2025-11-25 do.
fn has_default_dialect(version: Option<&ProtocolVersion>) -> bool {
    version.is_some_and(|v| v.as_str() >= ProtocolVersion::V_2025_11_25.as_str())
}

/// A `tools/list` entry whose schemas name their dialect, for a revision
/// that has no default one.
fn naming_dialect(mut tool: Value) -> Value {
    for key in ["inputSchema", "outputSchema"] {
        if let Some(schema) = tool.get(key) {
            tool[key] = schema::with_dialect(schema);
        }
    }
    tool
}

/// A `tools/list` entry for a revision without structured output.
/// Its title moves to `annotations.title`, where those revisions read it.
fn without_structured_output(mut tool: Value) -> Value {
    if let Value::Object(map) = &mut tool {
        map.remove("outputSchema");
        if let Some(title) = map.remove("title")
            && let Some(Value::Object(annotations)) = map.get_mut("annotations")
        {
            annotations.insert("title".to_owned(), title);
        }
    }
    tool
}

/// An `InputRequiredResult` from its JSON.
fn input_required(input: Value) -> Result<InputRequiredResult, ErrorData> {
    serde_json::from_value(input)
        .map_err(|e| ErrorData::internal_error(format!("building input_required: {e}"), None))
}

fn rpc_error(e: RpcError) -> ErrorData {
    ErrorData::new(ErrorCode(e.code), e.message, e.data)
}

/// What the edge offers. `subscribe`: some resource's service reports
/// changes (`watch.proto`), so subscriptions can deliver.
fn capabilities(subscribe: bool) -> ServerCapabilities {
    let caps = json!({
        "tools": {"listChanged": false},
        "resources": {"listChanged": false, "subscribe": subscribe},
        "prompts": {"listChanged": false},
        // Completions are not advertised: no argument has suggestions yet,
        // and an empty list for every request would only mislead. Streaming
        // tools send log messages at or above the level the client set
        // (`logging/setLevel`, or 2026-07-28's `_meta` logLevel).
        "logging": {},
    });
    serde_json::from_value(caps).expect("static capabilities deserialize")
}

impl ServerHandler for Gateway {
    fn get_info(&self) -> InitializeResult {
        let mut info = InitializeResult::new(capabilities(self.core.catalog.subscribable()));
        info.server_info = serde_json::from_value(self.server_info()).expect("static server info");
        info.instructions = Some(INSTRUCTIONS.to_owned());
        info
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(VERSIONS)
    }

    async fn discover(
        &self,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, ErrorData> {
        // Only the revisions without `initialize` are advertised (seed 003;
        // PROTOCOL.md A4): a client that read 2025-11-25 here could send it
        // in `_meta` without the handshake that revision needs. The legacy
        // profile is still answered for clients that begin with
        // `initialize`, and an UnsupportedProtocolVersion error still lists
        // every served revision, so such a client can find its way there.
        let body = json!({
            "supportedVersions": modern_versions(),
            "capabilities": capabilities(self.core.catalog.subscribable()),
            "instructions": INSTRUCTIONS,
        });
        self.result(body, DISCOVER_TTL_MS, "public")
    }

    #[allow(deprecated)] // logging/setLevel is deprecated (SEP-2577) but legacy clients send it
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let caller = self.caller(&ctx)?;
        let name = serde_json::to_value(request.level).unwrap_or(Value::Null);
        let level = name
            .as_str()
            .and_then(LogLevel::parse)
            .ok_or_else(|| ErrorData::invalid_params(format!("unknown log level {name}"), None))?;
        self.levels.set(&caller.principal, level);
        Ok(())
    }

    #[allow(deprecated)] // resources/subscribe is legacy-only; 2026-07-28 listens instead
    async fn subscribe(
        &self,
        request: rmcp::model::SubscribeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let caller = self.caller(&ctx)?;
        self.subscriptions
            .subscribe(
                &caller.principal,
                &request.uri,
                self.deliver(&ctx),
                caller.revoked.clone(),
            )
            .instrument(caller.span.clone())
            .await
            .map_err(rpc_error)
    }

    #[allow(deprecated)] // resources/unsubscribe is legacy-only
    async fn unsubscribe(
        &self,
        request: rmcp::model::UnsubscribeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let caller = self.caller(&ctx)?;
        self.subscriptions
            .unsubscribe(&caller.principal, &request.uri)
            .instrument(caller.span.clone())
            .await
            .map_err(rpc_error)
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        // Only resource updates: no list ever changes while the edge runs.
        // A URI is acknowledged when it names a subscribable resource; the
        // caller's right to it is checked when its watch opens (`listen`),
        // and a URI the caller may not read is then never updated, so the
        // acknowledgement tells nothing about another tenant's data.
        let uris = requested.resource_subscriptions.as_ref().map(|uris| {
            uris.iter()
                .filter(|uri| {
                    self.core
                        .catalog
                        .resource(uri)
                        .is_some_and(|(r, _)| r.subscribable())
                })
                .cloned()
                .collect::<Vec<_>>()
        });
        let mut accepted = SubscriptionFilter::default();
        accepted.resource_subscriptions = uris;
        Some(accepted)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let caller = self.caller(context.request_context())?;
        let uris = context
            .accepted()
            .resource_subscriptions
            .clone()
            .unwrap_or_default();
        if uris.len() > crate::subscribe::MAX_PER_CALLER {
            return Err(ErrorData::invalid_params(
                format!(
                    "resourceSubscriptions: at most {} URIs per listen",
                    crate::subscribe::MAX_PER_CALLER
                ),
                None,
            ));
        }
        // One watch per URI, for as long as the listen stream is open.
        let mut watches = tokio::task::JoinSet::new();
        for uri in uris {
            let stream = match self.core.watch_resource(&caller.principal, &uri).await {
                Ok(stream) => stream,
                Err(error) => {
                    tracing::debug!(uri, error = %error.message, "a listened URI is not watched");
                    continue;
                }
            };
            let core = self.core.clone();
            let principal = caller.principal.clone();
            let sink = context.sink().clone();
            watches.spawn(async move {
                let notify = |uri: String| {
                    let sink = sink.clone();
                    Box::pin(async move { sink.notify_resource_updated(uri).await.is_ok() })
                        as futures::future::BoxFuture<'static, bool>
                };
                crate::subscribe::follow(&core, &principal, &uri, stream, notify, || true).await;
            });
        }
        // The listen ends when its client goes, or when its key stops
        // verifying: a revoked key hears nothing more.
        let revoked = tokio::select! {
            () = context.cancelled() => false,
            () = caller.revoked.wait() => true,
        };
        watches.abort_all();
        if revoked {
            tracing::info!("a listen ended: its caller no longer verifies");
            return Err(ErrorData::new(
                ErrorCode(crate::core::codes::INVALID_REQUEST),
                "the listen ended: the caller's key no longer verifies",
                None,
            ));
        }
        Ok(())
    }

    async fn complete(
        &self,
        _request: rmcp::model::CompleteRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CompleteResult, ErrorData> {
        self.caller(&ctx)?;
        // No argument of ours has suggestions to offer yet.
        self.result(
            json!({"completion": {"values": [], "hasMore": false}}),
            0,
            "private",
        )
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        let tool = self.core.catalog.tool(name)?;
        serde_json::from_value(tool.to_json()).ok()
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let caller = self.caller(&ctx)?;
        let version = ctx.protocol_version();
        let structured = has_structured_output(version.as_ref());
        let dialect_named = has_default_dialect(version.as_ref());
        // Subject-scoped write tools depend on the caller's current session.
        let pin = session_pin(&ctx)?;
        let principal = self
            .core
            .with_current_session(&caller.principal, pin.as_deref())
            .await;
        let ttl = if self.core.lists_depend_on_session(&caller.principal) {
            0
        } else {
            LIST_TTL_MS
        };
        let tools: Vec<Value> = self
            .core
            .tools_for(&principal)
            .map(|t| t.to_json())
            .map(|t| if dialect_named { t } else { naming_dialect(t) })
            .map(|t| {
                if structured {
                    t
                } else {
                    without_structured_output(t)
                }
            })
            .collect();
        // The list depends on the caller's scopes, actor and session.
        self.result(json!({"tools": tools}), ttl, "private")
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let caller = self.caller(&ctx)?;
        let structured = has_structured_output(ctx.protocol_version().as_ref());
        let arguments = request.arguments.map(Value::Object);
        let name = request.name.to_string();
        let (sink, client, asks_inline) = self.call_io(&ctx, &caller.principal)?;
        let io = CallIo {
            sink: &sink,
            client,
            asks_inline,
            retry: Retry {
                input_responses: request.input_responses.map(|r| r.into_iter().collect()),
                request_state: request.request_state,
            },
            cancelled: ctx.ct.clone(),
        };
        let answer = self
            .core
            .call_tool(
                &caller.principal,
                session_pin(&ctx)?.as_deref(),
                &name,
                arguments,
                &io,
            )
            .instrument(caller.span.clone())
            .await
            .map_err(rpc_error)?;
        let result = match answer {
            Answer::Complete(result) => result,
            Answer::InputRequired(input) => return input_required(input).map(Into::into),
        };
        let mut result: CallToolResult = serde_json::from_value(result)
            .map_err(|e| ErrorData::internal_error(format!("building tool result: {e}"), None))?;
        // rmcp drops the field again for legacy peers.
        result.result_type = Some(rmcp::model::ResultType::COMPLETE);
        if !structured {
            // The text block already carries the same JSON.
            result.structured_content = None;
        }
        Ok(result.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.caller(&ctx)?;
        self.resource_list("resources", false)
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.caller(&ctx)?;
        self.resource_list("resourceTemplates", true)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let caller = self.caller(&ctx)?;
        let body = self
            .core
            .read_resource(&caller.principal, &request.uri)
            .instrument(caller.span.clone())
            .await
            .map_err(rpc_error)?;
        // Contents are the caller's tenant's data.
        let result: ReadResourceResult = self.result(body, 0, "private")?;
        Ok(result.into())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        self.caller(&ctx)?;
        let prompts: Vec<Value> = self
            .core
            .catalog
            .prompts
            .iter()
            .map(|p| p.to_json())
            .collect();
        self.result(json!({"prompts": prompts}), LIST_TTL_MS, "private")
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let caller = self.caller(&ctx)?;
        let arguments = request
            .arguments
            .map(|args| Value::Object(args.into_iter().collect()));
        let (sink, client, asks_inline) = self.call_io(&ctx, &caller.principal)?;
        let io = CallIo {
            sink: &sink,
            client,
            asks_inline,
            retry: Retry {
                input_responses: request.input_responses.map(|r| r.into_iter().collect()),
                request_state: request.request_state,
            },
            cancelled: ctx.ct.clone(),
        };
        let answer = self
            .core
            .get_prompt(&caller.principal, &request.name, arguments, &io)
            .instrument(caller.span.clone())
            .await
            .map_err(rpc_error)?;
        let body = match answer {
            Answer::Complete(body) => body,
            Answer::InputRequired(input) => return input_required(input).map(Into::into),
        };
        let mut result: GetPromptResult = serde_json::from_value(body)
            .map_err(|e| ErrorData::internal_error(format!("building prompt: {e}"), None))?;
        result.result_type = Some(rmcp::model::ResultType::COMPLETE);
        Ok(result.into())
    }
}
