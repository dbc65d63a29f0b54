//! Resources: reading one, and watching one for a subscription.
//!
//! A URI that names nothing, that needs a scope the caller lacks, or that
//! the service will not show the caller (another tenant's) is "resource
//! not found", all alike. A URI whose variables the service cannot read at
//! all (a cutout kind that does not exist, a candid that is not a number)
//! is refused with the service's reason: that depends on the URI alone,
//! never on what is stored or whose it is.

use crate::call::render;
use crate::catalog::Resource;
use crate::core::{Core, RpcError, WATCH_SPAN};
use crate::transcode;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ithaca_kit::principal::{Actor, Principal};
use ithaca_proto::mcp::v1 as mcp;
use ithaca_proto::mcp::v1::content::Kind as ContentKind;
use prost_reflect::{DynamicMessage, ReflectMessage};
use serde_json::{Value, json};
use tonic::Code;

impl Core {
    /// Read a resource: the `ReadResourceResult` JSON.
    pub async fn read_resource(&self, caller: &Principal, uri: &str) -> Result<Value, RpcError> {
        let (resource, args) = self.resource_for(caller, uri)?;
        let request = transcode::to_message(&resource.method.input(), Some(&args))
            .map_err(|e| RpcError::invalid_params(e.message, Some(json!({"uri": uri}))))?;
        let backend = self
            .backend(&resource.method)
            .map_err(|s| RpcError::internal(&s))?;
        match backend
            .unary(&resource.method, request, caller, &self.key)
            .await
        {
            Ok(response) => Ok(render_resource(resource, uri, &response)),
            Err(status) if status.code() == Code::InvalidArgument => Err(bad_uri(uri, &status)),
            Err(status) if status.code() == Code::NotFound => Err(not_found(uri)),
            Err(status) => Err(RpcError::internal(&status)),
        }
    }

    /// Open the watch of the resource at `uri` for `caller` (`watch.proto`):
    /// the stream of its changes. Refused as a read is; a resource whose
    /// service reports no changes cannot be subscribed to.
    pub async fn watch_resource(
        &self,
        caller: &Principal,
        uri: &str,
    ) -> Result<tonic::Streaming<DynamicMessage>, RpcError> {
        let (resource, args) = self.resource_for(caller, uri)?;
        let Some(watch) = &resource.watch else {
            return Err(RpcError::invalid_params(
                format!(
                    "resource {uri} cannot be subscribed to: its service does not report changes \
                     (subscribable: {})",
                    self.catalog
                        .resources
                        .iter()
                        .filter(|r| r.subscribable())
                        .map(|r| r.uri_template.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                Some(json!({"uri": uri})),
            ));
        };
        let request = transcode::to_message(&watch.input(), Some(&args))
            .map_err(|e| RpcError::invalid_params(e.message, Some(json!({"uri": uri}))))?;
        let backend = self.backend(watch).map_err(|s| RpcError::internal(&s))?;
        match backend
            .watch(watch, request, caller, &self.key, Some(WATCH_SPAN))
            .await
        {
            Ok(stream) => Ok(stream),
            Err(status)
                if matches!(
                    status.code(),
                    Code::NotFound | Code::InvalidArgument | Code::PermissionDenied
                ) =>
            {
                Err(not_found(uri))
            }
            Err(status) => Err(RpcError::internal(&status)),
        }
    }

    /// The resource at `uri` when `caller` may read it, and the arguments
    /// its template's variables give.
    fn resource_for(&self, caller: &Principal, uri: &str) -> Result<(&Resource, Value), RpcError> {
        let Some((resource, vars)) = self.catalog.resource(uri) else {
            return Err(not_found(uri));
        };
        if !resource.scopes().iter().all(|s| caller.has_scope(s)) && caller.actor() != Actor::System
        {
            return Err(not_found(uri));
        }
        let args: serde_json::Map<String, Value> = vars
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect();
        Ok((resource, Value::Object(args)))
    }
}

fn not_found(uri: &str) -> RpcError {
    RpcError::invalid_params(
        format!("resource not found: {uri}"),
        Some(json!({"uri": uri})),
    )
}

/// A URI the resource's service could not read: its reason, which names
/// the variable.
fn bad_uri(uri: &str, status: &tonic::Status) -> RpcError {
    RpcError::invalid_params(
        format!("resource {uri} cannot be read: {}", status.message()),
        Some(json!({"uri": uri})),
    )
}

/// A resource response as `ReadResourceResult` JSON.
fn render_resource(resource: &Resource, uri: &str, response: &DynamicMessage) -> Value {
    if response.descriptor().full_name() == crate::catalog::CONTENT_MESSAGE
        && let Ok(content) = response.transcode_to::<mcp::ToolContent>()
    {
        let contents: Vec<Value> = content
            .content
            .into_iter()
            .map(|c| match c.kind {
                Some(ContentKind::Resource(r)) => render::embedded(&r),
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
