//! Calling a backend with dynamic messages: the request and response types
//! are known only from descriptors, so a small codec encodes and decodes
//! `DynamicMessage`s for tonic's generic client.

use ithaca_kit::principal::{InternalKey, Principal};
use prost::Message;
use prost_reflect::{DynamicMessage, MessageDescriptor, MethodDescriptor};
use std::time::Duration;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::Channel;
use tonic::{Request, Status};

/// A backend service's channel and call deadline.
#[derive(Clone, Debug)]
pub struct Backend {
    /// The base URL, for messages.
    pub url: String,
    channel: Channel,
    timeout: Duration,
}

impl Backend {
    pub fn new(url: &str, timeout: Duration) -> Result<Self, ithaca_kit::client::BadUrl> {
        Ok(Backend {
            url: url.to_owned(),
            channel: ithaca_kit::client::channel(url)?,
            timeout,
        })
    }

    pub fn channel(&self) -> Channel {
        self.channel.clone()
    }

    /// The deadline of a call to this backend.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// One unary call on behalf of `principal`, with the deadline, the
    /// principal assertion and the current trace context in its metadata.
    /// An unreachable or slow backend yields UNAVAILABLE or
    /// DEADLINE_EXCEEDED within the deadline.
    pub async fn unary(
        &self,
        method: &MethodDescriptor,
        message: DynamicMessage,
        principal: &Principal,
        key: &InternalKey,
    ) -> Result<DynamicMessage, Status> {
        self.unary_within(method, message, principal, key, None)
            .await
    }

    /// [`Backend::unary`] with the method's own deadline when it has one (a
    /// long-poll tool waits longer than the backend default); the longer of
    /// the two applies.
    pub async fn unary_within(
        &self,
        method: &MethodDescriptor,
        message: DynamicMessage,
        principal: &Principal,
        key: &InternalKey,
        deadline: Option<Duration>,
    ) -> Result<DynamicMessage, Status> {
        let timeout = deadline.map_or(self.timeout, |d| d.max(self.timeout));
        let path = format!("/{}/{}", method.parent_service().full_name(), method.name());
        let path: http::uri::PathAndQuery = path
            .parse()
            .map_err(|_| Status::internal("invalid method path"))?;
        let mut request = Request::new(message);
        request.set_timeout(timeout);
        key.sign(&mut request, principal);
        let codec = DynamicCodec {
            output: method.output(),
        };
        let mut grpc = tonic::client::Grpc::new(self.channel.clone());
        let call = async {
            grpc.ready()
                .await
                .map_err(|e| Status::unavailable(format!("{} is unreachable: {e}", self.url)))?;
            grpc.unary(request, path, codec).await
        };
        match tokio::time::timeout(timeout, call).await {
            Ok(result) => result.map(tonic::Response::into_inner),
            Err(_) => Err(Status::deadline_exceeded(format!(
                "{} did not answer within {} ms",
                self.url,
                timeout.as_millis()
            ))),
        }
    }
}

/// Encodes any `DynamicMessage`, decodes the method's output type.
#[derive(Clone)]
struct DynamicCodec {
    output: MessageDescriptor,
}

impl Codec for DynamicCodec {
    type Encode = DynamicMessage;
    type Decode = DynamicMessage;
    type Encoder = DynamicEncoder;
    type Decoder = DynamicDecoder;

    fn encoder(&mut self) -> Self::Encoder {
        DynamicEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        DynamicDecoder(self.output.clone())
    }
}

struct DynamicEncoder;

impl Encoder for DynamicEncoder {
    type Item = DynamicMessage;
    type Error = Status;

    fn encode(&mut self, item: DynamicMessage, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        item.encode(dst)
            .map_err(|e| Status::internal(format!("encoding request: {e}")))
    }
}

struct DynamicDecoder(MessageDescriptor);

impl Decoder for DynamicDecoder {
    type Item = DynamicMessage;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<DynamicMessage>, Status> {
        DynamicMessage::decode(self.0.clone(), src)
            .map(Some)
            .map_err(|e| Status::internal(format!("decoding response: {e}")))
    }
}
