//! Calling a backend with dynamic messages: the request and response types
//! are known only from descriptors, so a small codec encodes and decodes
//! `DynamicMessage`s for tonic's generic client.

mod codec;

use codec::DynamicCodec;
use ithaca_kit::principal::{InternalKey, Principal};
use prost_reflect::{DynamicMessage, MethodDescriptor};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::Semaphore;
use tonic::transport::Channel;
use tonic::{Request, Status};

/// Calls in flight to one backend when none is configured: a quarter of
/// the listener's default connection cap, so one stalled service cannot
/// hold every connection of the edge.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 256;

/// The domain code of a call refused because its backend is saturated.
pub const BACKEND_BUSY: &str = ithaca_kit::error::DomainCode::BackendBusy.as_str();

/// A backend service's channel, call deadline and concurrency gate.
#[derive(Clone, Debug)]
pub struct Backend {
    /// The base URL, for messages.
    pub url: String,
    channel: Channel,
    timeout: Duration,
    /// Shared by every clone, so every service on this URL counts against
    /// one limit.
    gate: Arc<Gate>,
}

/// The calls in flight to one backend, at most `max`: a call beyond it is
/// refused at once (RESOURCE_EXHAUSTED, retryable) instead of queueing
/// behind a slow service. tower's `ConcurrencyLimit` would queue, and
/// `LoadShed` around it would change the channel's type for every client
/// built on it; a semaphore checked where every call of the edge passes
/// ([`Backend::unary_within`], [`Backend::server_streaming`] for the life of
/// its stream, [`Backend::typed`] for the session hops, and each message of
/// the session's append stream, `crate::appends`) does the same job.
#[derive(Debug)]
struct Gate {
    permits: Arc<Semaphore>,
    max: usize,
    refused: AtomicU64,
}

impl Gate {
    fn new(max: usize) -> Arc<Gate> {
        let max = if max == 0 { DEFAULT_MAX_IN_FLIGHT } else { max };
        Arc::new(Gate {
            permits: Arc::new(Semaphore::new(max)),
            max,
            refused: AtomicU64::new(0),
        })
    }
}

impl Backend {
    pub fn new(url: &str, timeout: Duration) -> Result<Self, ithaca_kit::client::BadUrl> {
        Ok(Backend {
            url: url.to_owned(),
            channel: ithaca_kit::client::channel(url)?,
            timeout,
            gate: Gate::new(DEFAULT_MAX_IN_FLIGHT),
        })
    }

    /// The same backend with at most `max` calls in flight (0: the
    /// default, [`DEFAULT_MAX_IN_FLIGHT`]).
    pub fn with_max_in_flight(mut self, max: usize) -> Self {
        self.gate = Gate::new(max);
        self
    }

    /// Calls in flight now.
    pub fn in_flight(&self) -> usize {
        self.gate.max - self.gate.permits.available_permits()
    }

    /// Calls refused so far because `max` were in flight.
    pub fn refused(&self) -> u64 {
        self.gate.refused.load(Ordering::Relaxed)
    }

    /// A place among the calls in flight, or the retryable refusal that
    /// names this backend.
    pub(crate) fn admit(&self, service: &str) -> Result<tokio::sync::OwnedSemaphorePermit, Status> {
        self.gate.permits.clone().try_acquire_owned().map_err(|_| {
            self.gate.refused.fetch_add(1, Ordering::Relaxed);
            let mut status = Status::resource_exhausted(format!(
                "{service} ({}) already has {} calls in flight, the most this edge sends it; \
                 retry shortly",
                self.url, self.gate.max
            ));
            status.metadata_mut().insert(
                ithaca_kit::error::DOMAIN_CODE_KEY,
                tonic::metadata::MetadataValue::from_static(BACKEND_BUSY),
            );
            status
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
        let call = self.prepare(method, message, principal, key, deadline)?;
        let _permit = self.admit(call.service.full_name())?;
        let (service, timeout) = (call.service.clone(), call.timeout);
        let mut grpc = tonic::client::Grpc::new(self.channel.clone());
        let answer = async {
            self.ready(&mut grpc, &service).await?;
            grpc.unary(call.request, call.path, call.codec).await
        };
        self.bounded(service.full_name(), timeout, answer).await
    }

    /// Wait for `call` at most `timeout`, its failure made clear. The
    /// channel also stops waiting at a call's `grpc-timeout`; this bound
    /// covers the wait for a connection and a response that never comes.
    async fn bounded<T>(
        &self,
        service: &str,
        timeout: Duration,
        call: impl std::future::Future<Output = Result<tonic::Response<T>, Status>>,
    ) -> Result<T, Status> {
        match tokio::time::timeout(timeout, call).await {
            Ok(result) => result
                .map(tonic::Response::into_inner)
                .map_err(|status| self.explain_within(service, status, timeout)),
            Err(_) => Err(self.timed_out(service, timeout)),
        }
    }

    /// One call of a generated client (the session and approvals hops)
    /// through this backend's concurrency gate and deadline (`deadline`
    /// when longer than the backend's, as for [`Backend::unary_within`]),
    /// its failure made clear like [`Backend::explain`]. The request should
    /// carry the same deadline as its `grpc-timeout`.
    pub async fn typed<T>(
        &self,
        service: &str,
        deadline: Option<Duration>,
        call: impl std::future::Future<Output = Result<tonic::Response<T>, Status>>,
    ) -> Result<T, Status> {
        let timeout = deadline.map_or(self.timeout, |d| d.max(self.timeout));
        let _permit = self.admit(service)?;
        self.bounded(service, timeout, call).await
    }

    /// Open a server-streaming call on behalf of `principal` (a streaming
    /// tool or prompt, `stream.proto`): signed, traced and admitted like a
    /// unary call (its place among the calls in flight is held until the
    /// stream is dropped), with `deadline` (or the backend's, whichever is
    /// longer) as the `grpc-timeout` of the whole stream. Returns the
    /// stream and that deadline, which the caller enforces while it reads.
    pub async fn server_streaming(
        &self,
        method: &MethodDescriptor,
        message: DynamicMessage,
        principal: &Principal,
        key: &InternalKey,
        deadline: Option<Duration>,
    ) -> Result<(BackendStream, Duration), Status> {
        let call = self.prepare(method, message, principal, key, deadline)?;
        let permit = self.admit(call.service.full_name())?;
        let (inner, timeout) = self.open(call).await?;
        let stream = BackendStream {
            inner,
            _permit: permit,
        };
        Ok((stream, timeout))
    }

    /// Open a resource's watch (`watch.proto`): signed and traced like a
    /// call, but not counted among the calls in flight, since a watch lasts
    /// as long as its subscription (those are capped per caller instead)
    /// and must not starve the backend's calls.
    pub async fn watch(
        &self,
        method: &MethodDescriptor,
        message: DynamicMessage,
        principal: &Principal,
        key: &InternalKey,
        deadline: Option<Duration>,
    ) -> Result<tonic::Streaming<DynamicMessage>, Status> {
        let call = self.prepare(method, message, principal, key, deadline)?;
        Ok(self.open(call).await?.0)
    }

    async fn open(
        &self,
        call: Prepared,
    ) -> Result<(tonic::Streaming<DynamicMessage>, Duration), Status> {
        let (service, timeout) = (call.service.clone(), call.timeout);
        let mut grpc = tonic::client::Grpc::new(self.channel.clone());
        let opened = async {
            self.ready(&mut grpc, &service).await?;
            grpc.server_streaming(call.request, call.path, call.codec)
                .await
        };
        let inner = self.bounded(service.full_name(), timeout, opened).await?;
        Ok((inner, timeout))
    }

    /// The request of one call of `method`: its path, the deadline (the
    /// method's own when longer than the backend's), the principal
    /// assertion and the trace context in its metadata.
    fn prepare(
        &self,
        method: &MethodDescriptor,
        message: DynamicMessage,
        principal: &Principal,
        key: &InternalKey,
        deadline: Option<Duration>,
    ) -> Result<Prepared, Status> {
        let timeout = deadline.map_or(self.timeout, |d| d.max(self.timeout));
        let service = method.parent_service();
        let path = format!("/{}/{}", service.full_name(), method.name());
        let path: http::uri::PathAndQuery = path
            .parse()
            .map_err(|_| Status::internal("invalid method path"))?;
        let mut request = Request::new(message);
        request.set_timeout(timeout);
        key.sign(&mut request, principal);
        Ok(Prepared {
            service: service.clone(),
            path,
            request,
            codec: DynamicCodec {
                output: method.output(),
            },
            timeout,
        })
    }

    /// Wait for the channel to take a call; a backend that cannot be
    /// reached is UNAVAILABLE naming it.
    async fn ready(
        &self,
        grpc: &mut tonic::client::Grpc<Channel>,
        service: &prost_reflect::ServiceDescriptor,
    ) -> Result<(), Status> {
        grpc.ready().await.map_err(|e| {
            Status::unavailable(format!(
                "{} ({}) is unreachable: {e}",
                service.full_name(),
                self.url
            ))
        })
    }

    /// A stream message that did not come within the call's deadline, or a
    /// status the stream ended with, made clear like [`Backend::explain`].
    pub fn explain_stream(&self, service: &str, status: Status, deadline: Duration) -> Status {
        self.explain_within(service, status, deadline)
    }

    /// The status of a stream that outlived its deadline.
    pub fn stream_timed_out(&self, service: &str, deadline: Duration) -> Status {
        self.timed_out(service, deadline)
    }

    /// A failed call to `service` on this backend, made clear for the
    /// agent: a call cut at its deadline (which tonic reports as CANCELLED
    /// "Timeout expired") becomes DEADLINE_EXCEEDED naming the service, its
    /// URL and the deadline; a connection failure, before or during the
    /// call, becomes UNAVAILABLE naming them; the service's own UNAVAILABLE
    /// is prefixed with its name. Other statuses the service answered pass
    /// unchanged.
    pub fn explain(&self, service: &str, status: Status) -> Status {
        self.explain_within(service, status, self.timeout)
    }

    fn explain_within(&self, service: &str, status: Status, deadline: Duration) -> Status {
        if is_timeout(&status) {
            return self.timed_out(service, deadline);
        }
        // A status built from a transport error carries that error as its
        // source; one the service sent does not.
        let from_transport = std::error::Error::source(&status).is_some();
        match status.code() {
            tonic::Code::Unavailable if from_transport => Status::unavailable(format!(
                "{service} ({}) is unreachable: {}",
                self.url,
                status.message()
            )),
            // The connection broke after the request went out (the service
            // was killed mid-call): tonic says UNKNOWN "transport error",
            // which would read as the service's own failure. The service may
            // be back at once (another replica, a restart), so this is
            // UNAVAILABLE, retryable, and says the outcome is unknown.
            tonic::Code::Unknown | tonic::Code::Internal | tonic::Code::Cancelled
                if from_transport =>
            {
                Status::unavailable(format!(
                    "{service} ({}) dropped the call, whose outcome is unknown: {}",
                    self.url,
                    status.message()
                ))
            }
            // The service answered that it cannot serve now (its database
            // is down, say): the agent hears which service.
            tonic::Code::Unavailable => Status::with_metadata(
                tonic::Code::Unavailable,
                format!("{service}: {}", status.message()),
                status.metadata().clone(),
            ),
            _ => status,
        }
    }

    fn timed_out(&self, service: &str, deadline: Duration) -> Status {
        Status::deadline_exceeded(format!(
            "{service} ({}) did not answer within {} ms",
            self.url,
            deadline.as_millis()
        ))
    }
}

/// Whether a call ended because a deadline passed: DEADLINE_EXCEEDED, or
/// the CANCELLED "Timeout expired" that tonic reports for a `grpc-timeout`
/// (on the client, with [`tonic::TimeoutExpired`] as its source, or sent
/// back by a server that enforced it).
pub fn is_timeout(status: &Status) -> bool {
    match status.code() {
        tonic::Code::DeadlineExceeded => true,
        tonic::Code::Cancelled => {
            let mut cause = std::error::Error::source(status);
            while let Some(e) = cause {
                if e.is::<tonic::TimeoutExpired>() {
                    return true;
                }
                cause = e.source();
            }
            status.message() == "Timeout expired"
        }
        _ => false,
    }
}

/// One call's request, ready to send.
struct Prepared {
    service: prost_reflect::ServiceDescriptor,
    path: http::uri::PathAndQuery,
    request: Request<DynamicMessage>,
    codec: DynamicCodec,
    timeout: Duration,
}

/// A streaming call's messages, holding the call's place among the
/// backend's calls in flight until it is dropped.
pub struct BackendStream {
    inner: tonic::Streaming<DynamicMessage>,
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl BackendStream {
    /// The next message, `None` at the end of the stream.
    pub async fn message(&mut self) -> Result<Option<DynamicMessage>, Status> {
        self.inner.message().await
    }
}
