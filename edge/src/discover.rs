//! Learning a backend's descriptors from its gRPC server reflection, so a
//! team can ship a new tool by deploying its own service: the edge needs no
//! rebuild.

use prost_reflect::DescriptorPool;
use std::collections::BTreeMap;
use tonic::transport::Channel;
use tonic_reflection::pb::v1::ServerReflectionRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

/// Services every server runs that are not the backend's own.
const INFRASTRUCTURE: &[&str] = &[
    "grpc.health.v1.Health",
    "grpc.reflection.v1.ServerReflection",
    "grpc.reflection.v1alpha.ServerReflection",
];

/// Reflection failed.
#[derive(Debug, thiserror::Error)]
pub enum DiscoverError {
    #[error("reflection call failed: {0}")]
    Rpc(#[from] tonic::Status),
    #[error("reflection answered unexpectedly: {0}")]
    Unexpected(String),
    #[error("descriptors do not form a valid pool: {0}")]
    Pool(#[from] prost_reflect::DescriptorError),
}

/// The backend's own services and a pool holding their files.
pub async fn reflect(channel: Channel) -> Result<(Vec<String>, DescriptorPool), DiscoverError> {
    let mut client = ServerReflectionClient::new(channel);
    let services = match ask(&mut client, MessageRequest::ListServices(String::new())).await? {
        MessageResponse::ListServicesResponse(list) => list
            .service
            .into_iter()
            .map(|s| s.name)
            .filter(|n| !INFRASTRUCTURE.contains(&n.as_str()))
            .collect::<Vec<_>>(),
        other => return Err(DiscoverError::Unexpected(format!("{other:?}"))),
    };
    // Raw file bytes by name: re-encoding through prost-types would drop the
    // method-option extensions the catalog reads.
    let mut files: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut wanted: Vec<MessageRequest> = services
        .iter()
        .map(|s| MessageRequest::FileContainingSymbol(s.clone()))
        .collect();
    // Servers may answer with the file alone; fetch missing imports by name
    // until the set is closed.
    while let Some(request) = wanted.pop() {
        let what = format!("{request:?}");
        match ask(&mut client, request).await? {
            MessageResponse::FileDescriptorResponse(r) => {
                for bytes in r.file_descriptor_proto {
                    let Some((name, imports)) = file_header(&bytes) else {
                        return Err(DiscoverError::Unexpected(
                            "an undecodable file descriptor".into(),
                        ));
                    };
                    for import in imports {
                        let pending = wanted.iter().any(
                            |w| matches!(w, MessageRequest::FileByFilename(f) if *f == import),
                        );
                        if !files.contains_key(&import) && !pending {
                            wanted.push(MessageRequest::FileByFilename(import));
                        }
                    }
                    files.entry(name).or_insert(bytes);
                }
            }
            MessageResponse::ErrorResponse(e) => {
                return Err(DiscoverError::Unexpected(format!(
                    "{what}: {}",
                    e.error_message
                )));
            }
            other => return Err(DiscoverError::Unexpected(format!("{other:?}"))),
        }
    }
    let mut set = Vec::new();
    for bytes in files.values() {
        // FileDescriptorSet.file is field 1, length-delimited.
        set.push(0x0a);
        encode_varint(bytes.len() as u64, &mut set);
        set.extend_from_slice(bytes);
    }
    let pool = DescriptorPool::decode(set.as_slice())?;
    Ok((services, pool))
}

async fn ask(
    client: &mut ServerReflectionClient<Channel>,
    request: MessageRequest,
) -> Result<MessageResponse, DiscoverError> {
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(request),
    };
    let mut responses = client
        .server_reflection_info(tokio_stream::iter([request]))
        .await?
        .into_inner();
    let response = responses
        .message()
        .await?
        .ok_or_else(|| DiscoverError::Unexpected("empty reflection stream".into()))?;
    response
        .message_response
        .ok_or_else(|| DiscoverError::Unexpected("reflection response without a message".into()))
}

/// The name and imports of an encoded FileDescriptorProto.
fn file_header(bytes: &[u8]) -> Option<(String, Vec<String>)> {
    use prost::Message;
    let file = prost_types::FileDescriptorProto::decode(bytes).ok()?;
    Some((file.name?, file.dependency))
}

fn encode_varint(mut n: u64, out: &mut Vec<u8>) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}
