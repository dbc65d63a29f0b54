//! The MCP catalog, built from descriptors: annotated RPCs become tools,
//! resources (or resource templates) and prompts. Nothing about an entry is
//! written twice: names, scopes and flags come from the method options,
//! descriptions from comments, schemas from the messages.

mod resource;

pub use resource::Resource;
use resource::{Part, parse_template};

use crate::schema::{self, Direction};
use ithaca_proto::annotations;
use ithaca_proto::mcp::v1::ToolOptions;
use prost_reflect::{DescriptorPool, MethodDescriptor};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// The message type whose responses are MCP content blocks.
pub const CONTENT_MESSAGE: &str = "ithaca.mcp.v1.ToolContent";
/// The message type whose responses are prompt messages.
pub const PROMPT_MESSAGE: &str = "ithaca.mcp.v1.PromptReply";
/// The stream type of a streaming tool or prompt RPC (`stream.proto`).
pub const EVENT_MESSAGE: &str = "ithaca.mcp.v1.CallEvent";
/// The stream type of a resource's watch RPC (`watch.proto`).
pub const CHANGED_MESSAGE: &str = "ithaca.mcp.v1.ResourceChanged";
/// The scope every tool call and resource read needs.
pub const BASE_SCOPE: &str = "data:read";

/// One tool.
#[derive(Clone, Debug)]
pub struct Tool {
    pub name: String,
    pub title: String,
    pub description: String,
    pub input_schema: Value,
    pub output_schema: Option<Value>,
    pub options: ToolOptions,
    pub method: MethodDescriptor,
    /// Whether the RPC is server-streaming (`returns (stream CallEvent)`):
    /// it may report progress and logs and ask the client for input.
    pub streaming: bool,
}

impl Tool {
    /// The scopes a call needs.
    pub fn scopes(&self) -> Vec<&str> {
        let mut scopes = vec![BASE_SCOPE];
        if !self.options.scope.is_empty() && self.options.scope != BASE_SCOPE {
            scopes.push(self.options.scope.as_str());
        }
        scopes
    }

    /// The tool's own deadline, when its options set one.
    pub fn deadline(&self) -> Option<std::time::Duration> {
        (self.options.deadline_ms > 0)
            .then(|| std::time::Duration::from_millis(u64::from(self.options.deadline_ms)))
    }

    /// The `tools/list` entry. The title is the tool's own `title` (clients
    /// of revisions before it get it as `annotations.title`, see
    /// `mcp::without_structured_output`), and a read-only tool's hints are
    /// only what the spec does not already imply: `destructiveHint` and
    /// `idempotentHint` mean something only for a tool that writes.
    pub fn to_json(&self) -> Value {
        let annotations = if self.options.read_only {
            json!({
                "readOnlyHint": true,
                "openWorldHint": self.options.open_world,
            })
        } else {
            json!({
                "readOnlyHint": false,
                "destructiveHint": self.options.destructive,
                "idempotentHint": false,
                "openWorldHint": self.options.open_world,
            })
        };
        let mut tool = json!({
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
            "annotations": annotations,
        });
        if !self.title.is_empty() {
            tool["title"] = json!(self.title);
        }
        if let Some(output) = &self.output_schema {
            tool["outputSchema"] = output.clone();
        }
        tool
    }
}

/// One prompt.
#[derive(Clone, Debug)]
pub struct Prompt {
    pub name: String,
    pub title: String,
    pub description: String,
    pub method: MethodDescriptor,
    /// Whether the RPC is server-streaming (`returns (stream CallEvent)`).
    pub streaming: bool,
}

impl Prompt {
    /// The `prompts/list` entry; arguments are the input message's fields.
    pub fn to_json(&self) -> Value {
        let arguments: Vec<Value> = self
            .method
            .input()
            .fields()
            .filter(|f| !schema::is_call_context(f))
            .map(|f| {
                let mut arg = json!({"name": f.name(), "required": schema::is_required(&f)});
                if let Some(c) = annotations::field_comment(&f) {
                    arg["description"] = json!(c);
                }
                arg
            })
            .collect();
        let mut prompt = json!({"name": self.name, "arguments": arguments});
        if !self.title.is_empty() {
            prompt["title"] = json!(self.title);
        }
        if !self.description.is_empty() {
            prompt["description"] = json!(self.description);
        }
        prompt
    }
}

/// An annotation that cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("{method}: tool name {name:?} must be 1-128 characters of A-Z a-z 0-9 _ - .")]
    BadToolName { method: String, name: String },
    #[error("tool {name:?} is declared twice ({first} and {second})")]
    Duplicate {
        name: String,
        first: String,
        second: String,
    },
    #[error("{method}: resource template {template:?} is malformed")]
    BadTemplate { method: String, template: String },
    #[error(
        "{method}: a streaming MCP method must be server-streaming only and stream {EVENT_MESSAGE}"
    )]
    BadStream { method: String },
    #[error("{method}: a watch must be server-streaming only and stream {CHANGED_MESSAGE}")]
    BadWatch { method: String },
    #[error("{method}: watches {template:?}, which no resource of {service} declares")]
    UnwatchedTemplate {
        method: String,
        template: String,
        service: String,
    },
    #[error(
        "{method}: result {result:?} must name a message of the pool, on a streaming tool only"
    )]
    BadResult { method: String, result: String },
    #[error("{method}: template variable {variable:?} is not a field of {input}")]
    UnknownVariable {
        method: String,
        variable: String,
        input: String,
    },
}

/// Everything the edge offers.
#[derive(Clone, Debug, Default)]
pub struct Catalog {
    pub tools: Vec<Tool>,
    pub resources: Vec<Resource>,
    pub prompts: Vec<Prompt>,
}

impl Catalog {
    /// Read every annotation in `pool`.
    pub fn from_pool(pool: &DescriptorPool) -> Result<Catalog, CatalogError> {
        let mut catalog = Catalog::default();
        catalog.add_pool(pool)?;
        Ok(catalog)
    }

    /// Add the annotations of another pool (another backend's).
    pub fn add_pool(&mut self, pool: &DescriptorPool) -> Result<(), CatalogError> {
        for t in annotations::tools(pool) {
            let name = t.options.name.clone();
            let valid = !name.is_empty()
                && name.len() <= 128
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b));
            if !valid {
                return Err(CatalogError::BadToolName {
                    method: t.method.full_name().to_owned(),
                    name,
                });
            }
            if let Some(existing) = self.tool(&name) {
                return Err(CatalogError::Duplicate {
                    name,
                    first: existing.method.full_name().to_owned(),
                    second: t.method.full_name().to_owned(),
                });
            }
            let streaming = streaming(&t.method)?;
            // A streaming tool's result is content blocks (`ToolContent`),
            // or the reply message its `result` option names.
            let output = match (streaming, t.options.result.as_str()) {
                (_, "") => t.method.output(),
                (true, name) => t
                    .method
                    .parent_pool()
                    .get_message_by_name(name)
                    .ok_or_else(|| CatalogError::BadResult {
                        method: t.method.full_name().to_owned(),
                        result: name.to_owned(),
                    })?,
                (false, name) => {
                    return Err(CatalogError::BadResult {
                        method: t.method.full_name().to_owned(),
                        result: name.to_owned(),
                    });
                }
            };
            let structured = !streaming || !t.options.result.is_empty();
            let output_schema = (output.full_name() != CONTENT_MESSAGE && structured).then(|| {
                let schema = schema::message_schema(&output, Direction::Output);
                if t.options.approval_required {
                    schema::or_pending_approval(schema)
                } else {
                    schema
                }
            });
            self.tools.push(Tool {
                title: t.options.title.clone(),
                description: t.description,
                input_schema: schema::message_schema(&t.method.input(), Direction::Input),
                output_schema,
                name,
                options: t.options,
                method: t.method,
                streaming,
            });
        }
        for r in annotations::resources(pool) {
            // Resources are read in one answer.
            if streaming(&r.method)? {
                return Err(CatalogError::BadStream {
                    method: r.method.full_name().to_owned(),
                });
            }
            let parts = parse_template(&r.options.uri_template).ok_or_else(|| {
                CatalogError::BadTemplate {
                    method: r.method.full_name().to_owned(),
                    template: r.options.uri_template.clone(),
                }
            })?;
            let input = r.method.input();
            for part in &parts {
                if let Part::Variable(v) = part
                    && input.get_field_by_name(v).is_none()
                {
                    return Err(CatalogError::UnknownVariable {
                        method: r.method.full_name().to_owned(),
                        variable: v.clone(),
                        input: input.full_name().to_owned(),
                    });
                }
            }
            let name = if r.options.name.is_empty() {
                r.method.name().to_owned()
            } else {
                r.options.name.clone()
            };
            let mime_type = if r.options.mime_type.is_empty() {
                "application/json".to_owned()
            } else {
                r.options.mime_type.clone()
            };
            self.resources.push(Resource {
                uri_template: r.options.uri_template.clone(),
                name,
                title: r.options.title.clone(),
                description: r.description,
                mime_type,
                scope: r.options.scope.clone(),
                method: r.method,
                watch: None,
                parts,
            });
        }
        for w in annotations::watches(pool) {
            let method = w.method.full_name().to_owned();
            let fits = !w.method.is_client_streaming()
                && w.method.is_server_streaming()
                && w.method.output().full_name() == CHANGED_MESSAGE;
            if !fits {
                return Err(CatalogError::BadWatch { method });
            }
            let service = w.method.parent_service();
            let template = w.options.uri_template;
            let Some(resource) = self.resources.iter_mut().find(|r| {
                r.uri_template == template
                    && r.method.parent_service().full_name() == service.full_name()
            }) else {
                return Err(CatalogError::UnwatchedTemplate {
                    method,
                    template,
                    service: service.full_name().to_owned(),
                });
            };
            let input = w.method.input();
            for part in &resource.parts {
                if let Part::Variable(v) = part
                    && input.get_field_by_name(v).is_none()
                {
                    return Err(CatalogError::UnknownVariable {
                        method,
                        variable: v.clone(),
                        input: input.full_name().to_owned(),
                    });
                }
            }
            resource.watch = Some(w.method);
        }
        for p in annotations::prompts(pool) {
            self.prompts.push(Prompt {
                name: p.options.name.clone(),
                title: p.options.title.clone(),
                description: p.description,
                streaming: streaming(&p.method)?,
                method: p.method,
            });
        }
        Ok(())
    }

    pub fn tool(&self, name: &str) -> Option<&Tool> {
        self.tools.iter().find(|t| t.name == name)
    }

    /// Whether any resource is subscribable (`resources.subscribe`).
    pub fn subscribable(&self) -> bool {
        self.resources.iter().any(Resource::subscribable)
    }

    pub fn prompt(&self, name: &str) -> Option<&Prompt> {
        self.prompts.iter().find(|p| p.name == name)
    }

    /// The resource serving `uri` and its template variables. Static URIs win
    /// over templates.
    pub fn resource(&self, uri: &str) -> Option<(&Resource, BTreeMap<String, String>)> {
        self.resources
            .iter()
            .filter(|r| !r.is_template())
            .chain(self.resources.iter().filter(|r| r.is_template()))
            .find_map(|r| r.matches(uri).map(|vars| (r, vars)))
    }
}

/// Whether an annotated RPC streams: server-streaming with
/// [`EVENT_MESSAGE`] as its stream type. A client-streaming RPC, or a
/// stream of anything else, cannot be mapped and is refused.
fn streaming(method: &MethodDescriptor) -> Result<bool, CatalogError> {
    let streams = method.is_server_streaming();
    let fits = !method.is_client_streaming()
        && (streams == (method.output().full_name() == EVENT_MESSAGE));
    if !fits {
        return Err(CatalogError::BadStream {
            method: method.full_name().to_owned(),
        });
    }
    Ok(streams)
}

#[cfg(test)]
mod tests;
