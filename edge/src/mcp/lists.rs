//! The list answers and rmcp's view of the tools, built once where they do
//! not change per caller.
//!
//! `tools/list` depends only on the negotiated revision (structured output,
//! the schema dialect), the caller's actor and scopes and its session's
//! subject kind; its answer is built once per such key and reused. The
//! resource, template and prompt lists depend on nothing of the caller's,
//! and are built once. Building a list is what cost: every tool's JSON
//! Schemas rendered to `Value`s and read back into rmcp's types.

use super::info::{LIST_TTL_MS, has_default_dialect, has_structured_output, server_info};
use crate::core::Core;
use crate::schema;
use bytes::Bytes;
use ithaca_kit::principal::Principal;
use rmcp::ErrorData;
use rmcp::model::{ProtocolVersion, Tool};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// How many `tools/list` answers are kept at most (one per revision class,
/// actor, scope set and subject kind: a deployment has a handful).
const MAX_TOOL_LISTS: usize = 256;

/// What a `tools/list` answer depends on.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct ToolsKey {
    structured: bool,
    dialect_named: bool,
    actor: &'static str,
    /// Sorted.
    scopes: Vec<String>,
    subject_kind: Option<String>,
}

/// One `tools/list` answer: typed, for rmcp, and printed, for the edge's
/// own 2026-07-28 path (`front/direct.rs`), which copies the bytes into
/// its response instead of cloning and printing the list each time.
#[derive(Clone)]
struct Listed {
    typed: rmcp::model::ListToolsResult,
    printed: Bytes,
}

/// The lists, built on first use.
#[derive(Default)]
pub(super) struct Lists {
    tools: Mutex<HashMap<ToolsKey, Listed>>,
    /// rmcp's view of each tool, which it asks for on every 2026-07-28
    /// `tools/call` (to check `Mcp-Param-*` headers against the schema).
    by_name: OnceLock<HashMap<String, Tool>>,
    resources: OnceLock<rmcp::model::ListResourcesResult>,
    templates: OnceLock<rmcp::model::ListResourceTemplatesResult>,
    prompts: OnceLock<rmcp::model::ListPromptsResult>,
}

impl Lists {
    /// The `tools/list` answer for `principal` (carrying its session's
    /// subject) in `version`.
    pub(super) fn tools(
        &self,
        core: &Core,
        principal: &Principal,
        version: Option<&ProtocolVersion>,
    ) -> Result<rmcp::model::ListToolsResult, ErrorData> {
        self.listed(core, principal, version).map(|l| l.typed)
    }

    /// The same answer as JSON, printed once per key.
    pub(super) fn tools_printed(
        &self,
        core: &Core,
        principal: &Principal,
        version: Option<&ProtocolVersion>,
    ) -> Result<Bytes, ErrorData> {
        self.listed(core, principal, version).map(|l| l.printed)
    }

    fn listed(
        &self,
        core: &Core,
        principal: &Principal,
        version: Option<&ProtocolVersion>,
    ) -> Result<Listed, ErrorData> {
        let mut scopes = principal.scopes().to_vec();
        scopes.sort_unstable();
        let key = ToolsKey {
            structured: has_structured_output(version),
            dialect_named: has_default_dialect(version),
            actor: principal.actor().as_str(),
            scopes,
            subject_kind: principal.subject().map(|s| s.kind.clone()),
        };
        let lock = || self.tools.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(listed) = lock().get(&key) {
            return Ok(listed.clone());
        }
        let typed = tool_list(core, principal, &key)?;
        let printed = serde_json::to_vec(&typed)
            .map_err(|e| ErrorData::internal_error(format!("printing the tool list: {e}"), None))?
            .into();
        let listed = Listed { typed, printed };
        let mut tools = lock();
        if tools.len() >= MAX_TOOL_LISTS {
            tools.clear();
        }
        tools.insert(key, listed.clone());
        Ok(listed)
    }

    /// rmcp's view of the tool `name`.
    pub(super) fn tool(&self, core: &Core, name: &str) -> Option<Tool> {
        let by_name = self.by_name.get_or_init(|| {
            core.catalog
                .tools
                .iter()
                .filter_map(|t| Some((t.name.clone(), serde_json::from_value(t.to_json()).ok()?)))
                .collect()
        });
        by_name.get(name).cloned()
    }

    pub(super) fn resources(
        &self,
        core: &Core,
    ) -> Result<rmcp::model::ListResourcesResult, ErrorData> {
        once(&self.resources, || resource_list(core, "resources", false))
    }

    pub(super) fn templates(
        &self,
        core: &Core,
    ) -> Result<rmcp::model::ListResourceTemplatesResult, ErrorData> {
        once(&self.templates, || {
            resource_list(core, "resourceTemplates", true)
        })
    }

    pub(super) fn prompts(&self, core: &Core) -> Result<rmcp::model::ListPromptsResult, ErrorData> {
        once(&self.prompts, || {
            let prompts: Vec<Value> = core.catalog.prompts.iter().map(|p| p.to_json()).collect();
            result(json!({"prompts": prompts}), LIST_TTL_MS, "private")
        })
    }
}

/// The value in `cell`, built by `build` the first time it succeeds.
fn once<T: Clone>(
    cell: &OnceLock<T>,
    build: impl FnOnce() -> Result<T, ErrorData>,
) -> Result<T, ErrorData> {
    if let Some(value) = cell.get() {
        return Ok(value.clone());
    }
    let value = build()?;
    Ok(cell.get_or_init(|| value).clone())
}

/// A result object with the cache hints and `serverInfo` of 2026-07-28.
pub(super) fn result<T: DeserializeOwned>(
    mut body: Value,
    ttl_ms: u64,
    scope: &str,
) -> Result<T, ErrorData> {
    body["resultType"] = json!("complete");
    body["ttlMs"] = json!(ttl_ms);
    body["cacheScope"] = json!(scope);
    body["_meta"] = json!({"io.modelcontextprotocol/serverInfo": server_info()});
    serde_json::from_value(body)
        .map_err(|e| ErrorData::internal_error(format!("building result: {e}"), None))
}

/// Build the `tools/list` answer of `key`.
fn tool_list(
    core: &Core,
    principal: &Principal,
    key: &ToolsKey,
) -> Result<rmcp::model::ListToolsResult, ErrorData> {
    let tools: Vec<Value> = core
        .tools_for(principal)
        .map(|t| t.to_json())
        .map(|t| {
            if key.dialect_named {
                t
            } else {
                naming_dialect(t)
            }
        })
        .map(|t| {
            if key.structured {
                t
            } else {
                without_structured_output(t)
            }
        })
        .collect();
    // The list depends on the caller's scopes, actor and session.
    let ttl = if core.lists_depend_on_session(principal) {
        0
    } else {
        LIST_TTL_MS
    };
    result(json!({"tools": tools}), ttl, "private")
}

/// The catalog's resources (`templates` false) or its resource
/// templates, under `field` of a list result.
fn resource_list<T: DeserializeOwned>(
    core: &Core,
    field: &str,
    templates: bool,
) -> Result<T, ErrorData> {
    let listed: Vec<Value> = core
        .catalog
        .resources
        .iter()
        .filter(|r| r.is_template() == templates)
        .map(|r| r.to_json())
        .collect();
    result(json!({ field: listed }), LIST_TTL_MS, "private")
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
