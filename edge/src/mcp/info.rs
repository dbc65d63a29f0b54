//! What the edge says of itself: the revisions it speaks, its
//! instructions to agents, its capabilities and its name.

use rmcp::model::{InitializeResult, ProtocolVersion, ServerCapabilities};
use serde_json::{Value, json};

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
pub(super) const LIST_TTL_MS: u64 = 60_000;
/// How long discovery may be cached.
pub(super) const DISCOVER_TTL_MS: u64 = 3_600_000;

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

/// What the edge offers. `subscribe`: some resource's service reports
/// changes (`watch.proto`), so subscriptions can deliver.
pub(super) fn capabilities(subscribe: bool) -> ServerCapabilities {
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

/// Whether `version` has structured tool output (`structuredContent`,
/// `outputSchema`, tool `title`), which arrived in 2025-06-18. Revisions are
/// dates, so they compare as strings.
pub(super) fn has_structured_output(version: Option<&ProtocolVersion>) -> bool {
    // A request that names no version over HTTP is 2025-03-26 by the
    // spec's rule; rmcp reports that as the version too.
    version.is_none_or(|v| v.as_str() >= ProtocolVersion::V_2025_06_18.as_str())
}

/// Whether `version` reads a schema without `$schema` as JSON Schema
/// 2020-12, as the revisions since 2025-11-25 do.
pub(super) fn has_default_dialect(version: Option<&ProtocolVersion>) -> bool {
    version.is_some_and(|v| v.as_str() >= ProtocolVersion::V_2025_11_25.as_str())
}

/// What `initialize` answers: capabilities, name, version, instructions.
pub(super) fn initialize_result(subscribe: bool) -> InitializeResult {
    let mut info = InitializeResult::new(capabilities(subscribe));
    info.server_info = serde_json::from_value(server_info()).expect("static server info");
    info.instructions = Some(INSTRUCTIONS.to_owned());
    info
}

/// The server's name and version, as `serverInfo` gives them.
pub(super) fn server_info() -> Value {
    json!({"name": "ithaca", "title": "Ithaca", "version": env!("CARGO_PKG_VERSION")})
}
