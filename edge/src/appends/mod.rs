//! The edge's end of `SessionService.AppendEvents`: a call's `BeginCall`
//! (the gate and the `tool_call`) and the events recorded after it
//! (`tool_result`, `error`, `denial`) ride one open stream instead of a
//! unary call each.
//!
//! - One stream per session backend, opened by the first message and again
//!   after it ends. Each message carries its own assertion (its caller's
//!   principal), `traceparent` and deadline; the answers come back by id.
//! - Each message still passes the backend's concurrency gate and waits at
//!   most the backend's deadline, as a unary call does, and a refusal
//!   reads as that call's would (`Backend::explain`).
//! - A stream that ends cleanly has answered every message it read (the
//!   session service's rule, `services/session/src/stream.rs`), so a
//!   message left unanswered then was never read: it is sent again on a
//!   fresh stream. A stream that breaks leaves its messages unknown; they
//!   fail UNAVAILABLE, as a unary call cut by a broken connection does.
//! - A session service that answers UNIMPLEMENTED (a replica of an earlier
//!   release, during a rolling upgrade) gets the unary `AppendEvent` and
//!   `BeginCall` for a while ([`Sent::Unary`]), then the stream is tried
//!   again.

mod stream;

use crate::backend::Backend;
use ithaca_kit::principal::{InternalKey, Principal};
use ithaca_proto::service_names::SESSION;
use ithaca_proto::session::v1 as spb;
use ithaca_proto::session::v1::streamed_append::Work;
use std::sync::Arc;
use stream::{Reply, Shared};
use tonic::Status;

/// How many streams one append is offered to before it gives up: a
/// stream ends cleanly when its server shuts down, and the next one may
/// reach a server that is shutting down too.
const ATTEMPTS: usize = 3;

/// The stream of one session backend.
pub struct Appends {
    shared: Arc<Shared>,
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
            shared: Arc::new(Shared::new(backend, key)),
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
        let _permit = match backend.admit(SESSION) {
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
