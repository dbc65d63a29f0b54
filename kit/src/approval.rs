//! The generic approval gate's wire pieces (DESIGN §5): how the approvals
//! service calls any service's approval-required RPC without knowing its
//! types, and how that RPC tells a check from the real call.
//!
//! When a tool marked `approval_required` is called, the approvals service
//! first calls its RPC with [`CHECK_KEY`] set: the service validates
//! everything it would validate (the object exists, the arguments are good,
//! the preconditions hold) and returns without changing anything. Only a
//! call that passes the check is filed for a person's decision; once
//! approved, the same encoded request runs for real, as the requester.

use crate::principal::{InternalKey, Principal};
use bytes::{Buf, BufMut};
use std::time::Duration;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;
use tonic::{Request, Status};

/// Metadata that marks a call as a check: validate, change nothing.
pub const CHECK_KEY: &str = "x-ithaca-approval-check";

/// Whether `request` is an approval check rather than the real call.
/// Services with approval-required RPCs return right after validating.
pub fn is_check<T>(request: &Request<T>) -> bool {
    request.metadata().get(CHECK_KEY).is_some()
}

/// Response metadata in which an owning service's check says what the call
/// would do, in its own terms (a filter version's pipeline and what it
/// replaces, a strategy's spec and backtest): JSON, shown to the person
/// who decides. Binary metadata, so any text travels.
pub const SUMMARY_KEY: &str = "x-ithaca-approval-summary-bin";

/// The largest summary a check may attach (JSON bytes): it travels in a
/// header, and HTTP/2 peers refuse header lists past 16 KiB.
pub const MAX_SUMMARY_BYTES: usize = 6 * 1024;

/// Attach `summary` to a check's response ([`SUMMARY_KEY`]). One that does
/// not fit [`MAX_SUMMARY_BYTES`] is replaced by a note saying so.
pub fn attach_summary<T>(response: &mut tonic::Response<T>, summary: &serde_json::Value) {
    let mut text = summary.to_string();
    if text.len() > MAX_SUMMARY_BYTES {
        text = serde_json::json!({
            "note": format!(
                "the summary of this call ({} bytes) is larger than {MAX_SUMMARY_BYTES} bytes; read the object itself",
                text.len()
            )
        })
        .to_string();
    }
    response.metadata_mut().insert_bin(
        SUMMARY_KEY,
        tonic::metadata::MetadataValue::from_bytes(text.as_bytes()),
    );
}

/// What an encoded call answered: the encoded response and, from a check,
/// the owner's summary of what the call would do.
#[derive(Clone, Debug, Default)]
pub struct Answer {
    pub body: Vec<u8>,
    pub summary: Option<serde_json::Value>,
}

/// A call of an RPC whose types the caller does not know.
#[derive(Clone, Copy, Debug)]
pub struct EncodedCall<'a> {
    /// The fully qualified gRPC service and the method name.
    pub service: &'a str,
    pub method: &'a str,
    /// The encoded request message.
    pub body: &'a [u8],
    /// A check ([`CHECK_KEY`]) rather than the real call.
    pub check: bool,
}

/// One unary call of `/{service}/{method}` with an already encoded request,
/// for `principal`, within `timeout`; returns the encoded response (and a
/// check's summary, when the owner attached one).
pub async fn call_encoded(
    channel: Channel,
    call: EncodedCall<'_>,
    principal: &Principal,
    key: &InternalKey,
    timeout: Duration,
) -> Result<Answer, Status> {
    let EncodedCall {
        service,
        method,
        body,
        check,
    } = call;
    let valid = |s: &str| {
        !s.is_empty()
            && s.len() <= 200
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_')
    };
    if !valid(service) || !valid(method) {
        return Err(Status::invalid_argument(format!(
            "method: {service}/{method} is not a gRPC method name"
        )));
    }
    let path: http::uri::PathAndQuery = format!("/{service}/{method}")
        .parse()
        .map_err(|_| Status::invalid_argument("method: not a gRPC method path"))?;
    let mut request = Request::new(body.to_vec());
    request.set_timeout(timeout);
    key.sign(&mut request, principal);
    if check {
        request
            .metadata_mut()
            .insert(CHECK_KEY, MetadataValue::from_static("1"));
    }
    let mut grpc = tonic::client::Grpc::new(channel);
    let call = async {
        grpc.ready()
            .await
            .map_err(|e| Status::unavailable(format!("{service} is unreachable: {e}")))?;
        grpc.unary(request, path, EncodedCodec).await
    };
    match tokio::time::timeout(timeout, call).await {
        Ok(result) => result.map(|response| {
            let summary = response
                .metadata()
                .get_bin(SUMMARY_KEY)
                .and_then(|v| v.to_bytes().ok())
                .filter(|b| b.len() <= MAX_SUMMARY_BYTES)
                .and_then(|b| serde_json::from_slice(&b).ok());
            Answer {
                body: response.into_inner(),
                summary,
            }
        }),
        Err(_) => Err(Status::deadline_exceeded(format!(
            "{service} did not answer within {} ms",
            timeout.as_millis()
        ))),
    }
}

/// Passes bytes through unchanged in both directions.
#[derive(Clone, Copy, Debug, Default)]
struct EncodedCodec;

impl Codec for EncodedCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = EncodedCodec;
    type Decoder = EncodedCodec;

    fn encoder(&mut self) -> Self::Encoder {
        EncodedCodec
    }

    fn decoder(&mut self) -> Self::Decoder {
        EncodedCodec
    }
}

impl Encoder for EncodedCodec {
    type Item = Vec<u8>;
    type Error = Status;

    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for EncodedCodec {
    type Item = Vec<u8>;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining()).to_vec()))
    }
}
