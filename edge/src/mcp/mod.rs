//! The MCP protocol face of the edge, on the official Rust SDK (`rmcp`).
//!
//! `rmcp` does the wire for both eras: 2026-07-28 (`server/discover`, the
//! required `_meta`, header/body validation, `resultType`, its error codes)
//! and the `initialize` profile, statelessly (no `Mcp-Session-Id`). This
//! handler fills in what only Ithaca knows: the catalog, per-caller filtering,
//! cache hints and the tool pipeline of [`crate::core`]. What `rmcp` does not
//! do the way we need (parse and batch errors, scopes, authentication,
//! Host/Origin) happens in the HTTP front before it (see `front/`).

mod caller;
mod info;
mod lists;

pub use caller::{CallerInfo, pin_of};
pub use info::{INSTRUCTIONS, LOG_LEVEL_META, NO_INITIALIZE_FROM, VERSIONS, modern_versions};

use crate::core::{Answer, Core, RpcError};
use crate::relay::Asks;
pub use crate::revoked::Revoked;
use crate::stream::{CallIo, LogLevel, Retry};
use crate::subscribe::Subscriptions;
use caller::{Reach, session_pin};
use info::{DISCOVER_TTL_MS, capabilities, has_structured_output, initialize_result};
use ithaca_kit::principal::Principal;
use lists::{Lists, result};
use rmcp::model::SubscriptionFilter;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, DiscoverResult, ErrorCode,
    GetPromptRequestParams, GetPromptResponse, GetPromptResult, InitializeResult,
    InputRequiredResult, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams,
    ReadResourceResponse, ReadResourceResult, Tool,
};
use rmcp::service::{RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};
use std::borrow::Cow;
use std::sync::Arc;
use tracing::Instrument;

/// The MCP handler. Cheap to clone.
#[derive(Clone)]
pub struct Gateway {
    core: Arc<Core>,
    /// Who requests come from and how calls reach them.
    reach: Reach,
    /// The list answers and rmcp's view of the tools, built once.
    lists: Arc<Lists>,
    /// Legacy resource subscriptions (and, over HTTP, the GET streams
    /// their updates go to).
    subscriptions: Arc<Subscriptions>,
    /// What `initialize` answers, built once: rmcp asks for it on every
    /// request (measured: building it each time was 4 % of the edge's heap
    /// allocations per call).
    info: Arc<InitializeResult>,
}

impl Gateway {
    /// A gateway for HTTP, where each request carries its caller.
    pub fn http(core: Arc<Core>) -> Self {
        Gateway {
            subscriptions: Subscriptions::new(core.clone()),
            info: Arc::new(initialize_result(core.catalog.subscribable())),
            core,
            reach: Reach::default(),
            lists: Arc::default(),
        }
    }

    /// A gateway for stdio, acting for `principal` throughout.
    pub fn stdio(core: Arc<Core>, principal: Principal) -> Self {
        Gateway {
            subscriptions: Subscriptions::new(core.clone()),
            info: Arc::new(initialize_result(core.catalog.subscribable())),
            core,
            reach: Reach {
                fixed: Some(principal),
                ..Reach::default()
            },
            lists: Arc::default(),
        }
    }

    /// The same gateway taking legacy answers through `asks` (one whose
    /// ids name this replica, `relay.rs`).
    pub fn with_asks(mut self, asks: Arc<Asks>) -> Self {
        self.reach.asks = asks;
        self
    }

    /// Where the HTTP layer delivers legacy clients' answers.
    pub fn asks(&self) -> Arc<Asks> {
        self.reach.asks.clone()
    }

    /// The `tools/list` result for `caller` (pinned to `pin`, if so) in
    /// `version`, as printed JSON: what the edge's own 2026-07-28 path
    /// answers (`front/direct.rs`), the same list [`Self::list_tools`]
    /// gives rmcp.
    pub async fn tools_printed(
        &self,
        caller: &Principal,
        pin: Option<&str>,
        version: &ProtocolVersion,
    ) -> Result<bytes::Bytes, ErrorData> {
        // Subject-scoped write tools depend on the caller's current session.
        let principal = self.core.with_current_session(caller, pin).await;
        self.lists
            .tools_printed(&self.core, &principal, Some(version))
    }

    /// The legacy subscriptions, whose updates the HTTP layer's GET
    /// streams carry.
    pub fn subscriptions(&self) -> Arc<Subscriptions> {
        self.subscriptions.clone()
    }
}

/// An `InputRequiredResult` from its JSON.
fn input_required(input: Value) -> Result<InputRequiredResult, ErrorData> {
    serde_json::from_value(input)
        .map_err(|e| ErrorData::internal_error(format!("building input_required: {e}"), None))
}

fn rpc_error(e: RpcError) -> ErrorData {
    ErrorData::new(ErrorCode(e.code), e.message, e.data)
}

impl ServerHandler for Gateway {
    fn get_info(&self) -> InitializeResult {
        InitializeResult::clone(&self.info)
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
        result(body, DISCOVER_TTL_MS, "public")
    }

    #[allow(deprecated)] // logging/setLevel is deprecated (SEP-2577) but legacy clients send it
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let caller = self.reach.caller(&ctx)?;
        let name = serde_json::to_value(request.level).unwrap_or(Value::Null);
        let level = name
            .as_str()
            .and_then(LogLevel::parse)
            .ok_or_else(|| ErrorData::invalid_params(format!("unknown log level {name}"), None))?;
        self.reach.levels.set(&caller.principal, level);
        Ok(())
    }

    #[allow(deprecated)] // resources/subscribe is legacy-only; 2026-07-28 listens instead
    async fn subscribe(
        &self,
        request: rmcp::model::SubscribeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let caller = self.reach.caller(&ctx)?;
        self.subscriptions
            .subscribe(
                &caller.principal,
                &request.uri,
                self.reach.deliver(&ctx),
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
        let caller = self.reach.caller(&ctx)?;
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
        let caller = self.reach.caller(context.request_context())?;
        crate::subscribe::listen(&self.core, &caller.principal, &caller.revoked, context).await
    }

    async fn complete(
        &self,
        _request: rmcp::model::CompleteRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CompleteResult, ErrorData> {
        self.reach.caller(&ctx)?;
        // No argument of ours has suggestions to offer yet.
        result(
            json!({"completion": {"values": [], "hasMore": false}}),
            0,
            "private",
        )
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.lists.tool(&self.core, name)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let caller = self.reach.caller(&ctx)?;
        // Subject-scoped write tools depend on the caller's current session.
        let pin = session_pin(&ctx)?;
        let principal = self
            .core
            .with_current_session(&caller.principal, pin.as_deref())
            .await;
        self.lists
            .tools(&self.core, &principal, ctx.protocol_version().as_ref())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let caller = self.reach.caller(&ctx)?;
        let structured = has_structured_output(ctx.protocol_version().as_ref());
        let arguments = request.arguments.map(Value::Object);
        let name = request.name.to_string();
        let (sink, client, asks_inline) = self.reach.call_io(&ctx, &caller.principal)?;
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
        Ok(typed_result(result, structured)?.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.reach.caller(&ctx)?;
        self.lists.resources(&self.core)
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.reach.caller(&ctx)?;
        self.lists.templates(&self.core)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let caller = self.reach.caller(&ctx)?;
        let body = self
            .core
            .read_resource(&caller.principal, &request.uri)
            .instrument(caller.span.clone())
            .await
            .map_err(rpc_error)?;
        // Contents are the caller's tenant's data.
        let result: ReadResourceResult = result(body, 0, "private")?;
        Ok(result.into())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        self.reach.caller(&ctx)?;
        self.lists.prompts(&self.core)
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let caller = self.reach.caller(&ctx)?;
        let arguments = request
            .arguments
            .map(|args| Value::Object(args.into_iter().collect()));
        let (sink, client, asks_inline) = self.reach.call_io(&ctx, &caller.principal)?;
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

/// The typed `CallToolResult` of a call's JSON answer, moving its parts:
/// `structuredContent` (the tool's whole answer) is moved in as it is, not
/// rebuilt, and is dropped unread for a revision without structured output
/// (the text block already carries the same JSON). rmcp serializes the
/// typed result once, into the answer's bytes.
fn typed_result(result: Value, structured: bool) -> Result<CallToolResult, ErrorData> {
    let building = |e: serde_json::Error| {
        ErrorData::internal_error(format!("building tool result: {e}"), None)
    };
    let Value::Object(mut fields) = result else {
        return Err(ErrorData::internal_error(
            "building tool result: the answer is not an object",
            None,
        ));
    };
    let structured_content = fields.remove("structuredContent");
    let mut typed: CallToolResult =
        serde_json::from_value(Value::Object(fields)).map_err(building)?;
    if structured {
        typed.structured_content = structured_content;
    }
    // rmcp drops the field again for legacy peers.
    typed.result_type = Some(rmcp::model::ResultType::COMPLETE);
    Ok(typed)
}
