//! Reading the MCP annotations (`ithaca.mcp.v1` method options) and the
//! comments out of a descriptor pool.
//!
//! The pool is usually [`pool()`], the embedded set, but any pool works: the
//! edge can also reflect on a backend's descriptors fetched at run time.

use crate::mcp::v1::{FieldBounds, PromptOptions, ResourceOptions, ToolOptions, WatchOptions};
use prost_reflect::{DescriptorPool, MethodDescriptor, Value};
use std::sync::LazyLock;

/// Extension names, as declared in `ithaca/mcp/v1/options.proto`.
pub const TOOL_EXTENSION: &str = "ithaca.mcp.v1.tool";
pub const RESOURCE_EXTENSION: &str = "ithaca.mcp.v1.resource";
pub const PROMPT_EXTENSION: &str = "ithaca.mcp.v1.prompt";
pub const WATCH_EXTENSION: &str = "ithaca.mcp.v1.watch";
pub const FIELD_EXTENSION: &str = "ithaca.mcp.v1.field";

static POOL: LazyLock<DescriptorPool> = LazyLock::new(|| {
    DescriptorPool::decode(crate::FILE_DESCRIPTOR_SET)
        .expect("the descriptor set embedded at build time decodes")
});

/// The embedded descriptor pool.
pub fn pool() -> &'static DescriptorPool {
    &POOL
}

/// An RPC with one kind of annotation.
#[derive(Clone, Debug)]
pub struct Annotated<T> {
    pub method: MethodDescriptor,
    pub options: T,
    /// The RPC's leading comment, whitespace-trimmed per line.
    pub description: String,
}

/// Every RPC annotated as an MCP tool.
pub fn tools(pool: &DescriptorPool) -> Vec<Annotated<ToolOptions>> {
    annotated(pool, TOOL_EXTENSION)
}

/// Every RPC annotated as an MCP resource.
pub fn resources(pool: &DescriptorPool) -> Vec<Annotated<ResourceOptions>> {
    annotated(pool, RESOURCE_EXTENSION)
}

/// Every RPC annotated as an MCP prompt.
pub fn prompts(pool: &DescriptorPool) -> Vec<Annotated<PromptOptions>> {
    annotated(pool, PROMPT_EXTENSION)
}

/// Every RPC annotated as the watch of a resource (`watch.proto`).
pub fn watches(pool: &DescriptorPool) -> Vec<Annotated<WatchOptions>> {
    annotated(pool, WATCH_EXTENSION)
}

fn annotated<T: prost::Message + Default>(
    pool: &DescriptorPool,
    extension: &str,
) -> Vec<Annotated<T>> {
    let Some(ext) = pool.get_extension_by_name(extension) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for service in pool.services() {
        for method in service.methods() {
            let options = method.options();
            if !options.has_extension(&ext) {
                continue;
            }
            let Value::Message(message) = options.get_extension(&ext).into_owned() else {
                continue;
            };
            // A malformed option is skipped rather than trusted.
            let Ok(options) = message.transcode_to::<T>() else {
                continue;
            };
            let description = leading_comment(&method).unwrap_or_default();
            found.push(Annotated {
                method,
                options,
                description,
            });
        }
    }
    found
}

/// The leading comment of a method, from the file's source info.
pub fn leading_comment(method: &MethodDescriptor) -> Option<String> {
    comment_at(
        &method
            .parent_file()
            .file_descriptor_proto()
            .source_code_info,
        method.path(),
    )
}

/// The bounds a request field declares (`ithaca.mcp.v1.field`), if any.
/// The extension is looked up in the field's own pool, so a backend's
/// reflected descriptors work as the embedded ones do.
pub fn field_bounds(field: &prost_reflect::FieldDescriptor) -> Option<FieldBounds> {
    let ext = field.parent_pool().get_extension_by_name(FIELD_EXTENSION)?;
    let options = field.options();
    if !options.has_extension(&ext) {
        return None;
    }
    let Value::Message(message) = options.get_extension(&ext).into_owned() else {
        return None;
    };
    // A malformed option is ignored rather than trusted.
    message.transcode_to::<FieldBounds>().ok()
}

/// The leading comment of a message field.
pub fn field_comment(field: &prost_reflect::FieldDescriptor) -> Option<String> {
    comment_at(
        &field.parent_file().file_descriptor_proto().source_code_info,
        field.path(),
    )
}

/// A comment as prose: the lines of a paragraph, which are wrapped only to
/// fit the source, join with a space; a blank line, and a line that starts
/// a list item, still start a new line. (A description is read by a model
/// in every `tools/list`, where each line break costs an escape.)
fn comment_at(info: &Option<prost_types::SourceCodeInfo>, path: &[i32]) -> Option<String> {
    let location = info.as_ref()?.location.iter().find(|l| l.path == path)?;
    let text = location.leading_comments.as_deref()?;
    let mut joined = String::new();
    let mut blank = false;
    for line in text.lines().map(str::trim) {
        if line.is_empty() {
            blank = true;
            continue;
        }
        let item = line.starts_with("- ")
            || line.starts_with("* ")
            || line
                .split_once(". ")
                .is_some_and(|(n, _)| n.parse::<u32>().is_ok());
        if !joined.is_empty() {
            joined.push_str(if blank {
                "\n\n"
            } else if item {
                "\n"
            } else {
                " "
            });
        }
        joined.push_str(line);
        blank = false;
    }
    (!joined.is_empty()).then_some(joined)
}
