//! The edge's end of `SessionService.AppendEvents`: a call's `BeginCall`
//! (the gate and the `tool_call`) and the events recorded after it
//! (`tool_result`, `error`, `denial`) ride one open stream instead of a
//! unary call each.
//!
//! - One stream per session backend, opened by the first append and again
//!   after it ends. Each append is a message with its own assertion (its
//!   caller's principal) and `traceparent`; the answers come back by id.
//! - Each append still passes the backend's concurrency gate and waits at
//!   most the backend's deadline, as a unary call does.
//! - A stream that ends cleanly has answered every message it read (the
//!   session service's rule, `services/session/src/stream.rs`), so an
//!   append left unanswered then was never read: it is sent again on a
//!   fresh stream. A stream that breaks leaves its appends unknown; they
//!   fail UNAVAILABLE, as a unary call cut by a broken connection does.
//! - A session service that answers UNIMPLEMENTED (a replica of an earlier
//!   release, during a rolling upgrade) gets unary `AppendEvent`s for a
//!   while, then the stream is tried again.

use crate::backend::Backend;
use ithaca_kit::principal::{InternalKey, Principal};
use ithaca_proto::service_names::SESSION;
use ithaca_proto::session::v1 as spb;
use ithaca_proto::session::v1::streamed_append::Work;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::{Request, Status};

const PATH: &str = "/ithaca.session.v1.SessionService/AppendEvents";

/// How long unary calls are used after the service said it has no stream.
const UNSUPPORTED_FOR: Duration = Duration::from_secs(30);

/// How many streams one append is offered to before it gives up: a
/// stream ends cleanly when its server shuts down, and the next one may
/// reach a server that is shutting down too.
const ATTEMPTS: usize = 3;

/// The stream of one session backend.
pub struct Appends {
    shared: Arc<Shared>,
}

struct Shared {
    backend: Backend,
    key: InternalKey,
    slot: Mutex<Slot>,
    /// Held while a stream is being opened, so concurrent appends wait for
    /// that one instead of opening their own.
    opening: tokio::sync::Mutex<()>,
}

enum Slot {
    Closed,
    Open(Arc<Open>),
    /// The service has no `AppendEvents`: unary calls until then.
    Unsupported(Instant),
}

/// One open stream: where messages go, and who waits for which answer.
struct Open {
    tx: mpsc::UnboundedSender<spb::StreamedAppend>,
    waiting: Arc<Mutex<Waiting>>,
    next_id: AtomicU64,
}

#[derive(Default)]
struct Waiting {
    /// Set by the reader when the stream ended: nothing may wait any more.
    ended: bool,
    by_id: HashMap<u64, oneshot::Sender<Reply>>,
}

enum Reply {
    Answer(spb::StreamedAppendAnswer),
    /// The stream ended cleanly without reading the message.
    Unread,
    /// The stream broke: whether the message was appended is unknown.
    Broken(Status),
}

/// What became of a message.
pub enum Sent<T> {
    /// Done (an append's `seq`, a `BeginCall`'s answer), or refused as the
    /// unary call would have been.
    Done(Result<T, Status>),
    /// The service has no stream: make the unary call instead.
    Unary,
}

impl<T> Sent<T> {
    fn map<U>(self, f: impl FnOnce(T) -> U) -> Sent<U> {
        match self {
            Sent::Done(done) => Sent::Done(done.map(f)),
            Sent::Unary => Sent::Unary,
        }
    }
}

/// A `BeginCall` done on the stream: the `tool_call`'s seq and the
/// session the call runs in.
pub struct Begun {
    pub seq: i64,
    pub session: spb::CallSession,
}

impl Appends {
    pub fn new(backend: Backend, key: InternalKey) -> Self {
        Appends {
            shared: Arc::new(Shared {
                backend,
                key,
                slot: Mutex::new(Slot::Closed),
                opening: tokio::sync::Mutex::new(()),
            }),
        }
    }

    /// Append `append` for `principal`: the event's seq.
    pub async fn append(
        &self,
        principal: &Principal,
        append: spb::AppendEventRequest,
    ) -> Sent<i64> {
        self.work(principal, Work::Append(append))
            .await
            .map(|answer| answer.seq)
    }

    /// `BeginCall` for `principal`.
    pub async fn begin_call(
        &self,
        principal: &Principal,
        begin: spb::BeginCallRequest,
    ) -> Sent<Begun> {
        self.work(principal, Work::BeginCall(begin))
            .await
            .map(|answer| Begun {
                seq: answer.seq,
                session: answer.session.unwrap_or_default(),
            })
    }

    /// Send `work` for `principal` and wait for its answer, within the
    /// backend's gate and deadline.
    async fn work(&self, principal: &Principal, work: Work) -> Sent<spb::StreamedAppendAnswer> {
        let backend = &self.shared.backend;
        let _permit = match backend.admit_call(SESSION) {
            Ok(permit) => permit,
            Err(status) => return Sent::Done(Err(status)),
        };
        let timeout = backend.timeout();
        let message = spb::StreamedAppend {
            id: 0,
            deadline_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
            assertion: self
                .shared
                .key
                .mint(principal, ithaca_kit::principal::DEFAULT_TTL_SECS),
            traceparent: ithaca_kit::propagation::current_traceparent(),
            work: Some(work),
        };
        match tokio::time::timeout(timeout, self.send(message)).await {
            Ok(sent) => sent,
            Err(_) => Sent::Done(Err(backend.stream_timed_out(SESSION, timeout))),
        }
    }

    async fn send(&self, message: spb::StreamedAppend) -> Sent<spb::StreamedAppendAnswer> {
        for _ in 0..ATTEMPTS {
            let open = match self.shared.stream().await {
                Ok(Some(open)) => open,
                Ok(None) => return Sent::Unary,
                Err(status) => return Sent::Done(Err(status)),
            };
            let Some(mut ticket) = open.send(message.clone()) else {
                // It ended between the slot and the send: take the next.
                continue;
            };
            drop(open);
            match (&mut ticket.answer).await {
                // A refusal reads as the unary call's would, through the
                // backend's explanation (the service's own UNAVAILABLE
                // names the service).
                Ok(Reply::Answer(answer)) => {
                    return Sent::Done(
                        outcome(answer)
                            .map_err(|status| self.shared.backend.explain(SESSION, status)),
                    );
                }
                Ok(Reply::Broken(status)) => return Sent::Done(Err(status)),
                // Never read: offer it to the next stream.
                Ok(Reply::Unread) | Err(_) => {}
            }
        }
        Sent::Done(Err(Status::unavailable(format!(
            "{SESSION} ({}) ended {ATTEMPTS} append streams in a row before reading this event; \
             it was not appended",
            self.shared.backend.url
        ))))
    }
}

/// An answer read as a unary call's outcome: a refusal is the status the
/// call would have failed with, its domain code in the metadata.
fn outcome(mut answer: spb::StreamedAppendAnswer) -> Result<spb::StreamedAppendAnswer, Status> {
    if answer.code == 0 {
        return Ok(answer);
    }
    let mut status = Status::new(
        tonic::Code::from(answer.code),
        std::mem::take(&mut answer.message),
    );
    if let Ok(domain) = tonic::metadata::MetadataValue::try_from(answer.domain_code.as_str())
        && !answer.domain_code.is_empty()
    {
        status
            .metadata_mut()
            .insert(ithaca_kit::error::DOMAIN_CODE_KEY, domain);
    }
    Err(status)
}

/// A message's place among the waiters: its answer, and its entry taken
/// back when the append gives up before the answer came (its deadline).
struct Ticket {
    answer: oneshot::Receiver<Reply>,
    id: u64,
    waiting: Arc<Mutex<Waiting>>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if matches!(
            self.answer.try_recv(),
            Err(oneshot::error::TryRecvError::Empty)
        ) {
            self.waiting
                .lock()
                .expect("append waiters")
                .by_id
                .remove(&self.id);
        }
    }
}

impl Open {
    /// Queue `message` under a fresh id; `None` when the stream has ended.
    fn send(&self, mut message: spb::StreamedAppend) -> Option<Ticket> {
        let (tx, rx) = oneshot::channel();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        {
            let mut waiting = self.waiting.lock().expect("append waiters");
            if waiting.ended {
                return None;
            }
            waiting.by_id.insert(id, tx);
        }
        message.id = id;
        if self.tx.send(message).is_err() {
            // The request side is gone; the reader answers the waiter.
            tracing::debug!("append stream closed before a message was queued");
        }
        Some(Ticket {
            answer: rx,
            id,
            waiting: self.waiting.clone(),
        })
    }
}

impl Shared {
    /// The open stream, opened now if there is none; `None` when the
    /// service has no stream.
    async fn stream(self: &Arc<Self>) -> Result<Option<Arc<Open>>, Status> {
        if let Some(found) = self.current() {
            return Ok(found);
        }
        let _opening = self.opening.lock().await;
        if let Some(found) = self.current() {
            return Ok(found);
        }
        let opened = self.open().await?;
        let mut slot = self.slot.lock().expect("append stream slot");
        *slot = match &opened {
            Some(open) => Slot::Open(open.clone()),
            None => Slot::Unsupported(Instant::now() + UNSUPPORTED_FOR),
        };
        Ok(opened)
    }

    /// What the slot holds, when that settles it.
    fn current(&self) -> Option<Option<Arc<Open>>> {
        match &*self.slot.lock().expect("append stream slot") {
            Slot::Open(open) => Some(Some(open.clone())),
            Slot::Unsupported(until) if Instant::now() < *until => Some(None),
            _ => None,
        }
    }

    async fn open(self: &Arc<Self>) -> Result<Option<Arc<Open>>, Status> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut request = Request::new(UnboundedReceiverStream::new(rx));
        // The stream's own assertion admits the stream and nothing else:
        // a system caller of no tenant. No trace context: the stream
        // outlives the call that opened it, and each message carries its
        // own.
        self.key
            .attach(request.metadata_mut(), &Principal::system(""));
        request
            .extensions_mut()
            .insert(tonic::GrpcMethod::new(SESSION, "AppendEvents"));
        let mut grpc = tonic::client::Grpc::new(self.backend.channel());
        let opened = async {
            grpc.ready().await.map_err(|e| {
                Status::unavailable(format!(
                    "{SESSION} ({}) is unreachable: {e}",
                    self.backend.url
                ))
            })?;
            grpc.streaming(
                request,
                http::uri::PathAndQuery::from_static(PATH),
                tonic_prost::ProstCodec::<spb::StreamedAppend, spb::StreamedAppendAnswer>::default(
                ),
            )
            .await
        };
        let inbound = match opened.await {
            Ok(response) => response.into_inner(),
            Err(status) if status.code() == tonic::Code::Unimplemented => {
                tracing::info!(
                    url = %self.backend.url,
                    "the session service has no AppendEvents stream; appending with unary calls"
                );
                return Ok(None);
            }
            // Nothing is on a stream that did not open (messages are
            // queued only once it is open), so nothing is in doubt: a
            // broken connection says so rather than "outcome unknown".
            Err(status)
                if status.code() == tonic::Code::Unavailable
                    || std::error::Error::source(&status).is_some() =>
            {
                return Err(Status::unavailable(format!(
                    "{SESSION} ({}) is unreachable: {}; nothing was sent",
                    self.backend.url,
                    status.message()
                )));
            }
            Err(status) => return Err(self.backend.explain(SESSION, status)),
        };
        let open = Arc::new(Open {
            tx,
            waiting: Arc::default(),
            next_id: AtomicU64::new(1),
        });
        tokio::spawn(read(
            inbound,
            open.waiting.clone(),
            Arc::downgrade(self),
            Arc::downgrade(&open),
        ));
        Ok(Some(open))
    }
}

/// Hand each answer to its waiter; when the stream ends, answer the rest
/// and clear the slot so the next append opens a fresh stream.
async fn read(
    mut inbound: tonic::Streaming<spb::StreamedAppendAnswer>,
    waiting: Arc<Mutex<Waiting>>,
    shared: Weak<Shared>,
    this: Weak<Open>,
) {
    let broken = loop {
        match inbound.message().await {
            Ok(Some(answer)) => {
                let waiter = waiting
                    .lock()
                    .expect("append waiters")
                    .by_id
                    .remove(&answer.id);
                // A waiter that timed out is gone; its answer with it.
                if let Some(waiter) = waiter {
                    let _ = waiter.send(Reply::Answer(answer));
                }
            }
            Ok(None) => break None,
            Err(status) => break Some(status),
        }
    };
    if let Some(shared) = shared.upgrade() {
        let mut slot = shared.slot.lock().expect("append stream slot");
        if let Slot::Open(open) = &*slot
            && Weak::ptr_eq(&Arc::downgrade(open), &this)
        {
            *slot = Slot::Closed;
        }
    }
    let left = {
        let mut waiting = waiting.lock().expect("append waiters");
        waiting.ended = true;
        std::mem::take(&mut waiting.by_id)
    };
    let explained = match (&broken, shared.upgrade()) {
        (Some(status), Some(shared)) => {
            tracing::warn!(error = %status.message(), left = left.len(), "the append stream broke");
            Some(shared.backend.explain(SESSION, status.clone()))
        }
        (Some(status), None) => Some(status.clone()),
        (None, _) => None,
    };
    for (_, waiter) in left {
        let reply = match &explained {
            None => Reply::Unread,
            Some(status) => Reply::Broken(Status::unavailable(format!(
                "the append stream to {SESSION} broke with the event in flight; whether it was \
                 appended is unknown: {}",
                status.message()
            ))),
        };
        let _ = waiter.send(reply);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ithaca_kit::error::{DomainCode, domain};

    #[test]
    fn an_answer_is_the_unary_calls_outcome() {
        let done = spb::StreamedAppendAnswer {
            id: 3,
            seq: 42,
            ..Default::default()
        };
        assert_eq!(outcome(done).expect("appended").seq, 42);

        let refused = spb::StreamedAppendAnswer {
            id: 4,
            code: tonic::Code::FailedPrecondition as i32,
            message: "open a session first".into(),
            domain_code: "NO_ACTIVE_SESSION".into(),
            ..Default::default()
        };
        let status = outcome(refused).expect_err("refused");
        assert_eq!(status.code(), tonic::Code::FailedPrecondition);
        assert_eq!(status.message(), "open a session first");
        assert_eq!(domain(&status), Some(DomainCode::NoActiveSession));

        // No domain code: none in the metadata either.
        let plain = spb::StreamedAppendAnswer {
            code: tonic::Code::InvalidArgument as i32,
            message: "payload_json: not JSON".into(),
            ..Default::default()
        };
        let status = outcome(plain).expect_err("refused");
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(ithaca_kit::error::domain_code(&status).is_none());
    }
}
