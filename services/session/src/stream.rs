//! `AppendEvents`: many appends on one open stream.
//!
//! A unary `AppendEvent` costs a call of its own on both sides: an HTTP/2
//! stream, headers with an assertion, the server's span and layers, and a
//! task. The edge records two or three events per tool call, so it sends
//! its appends as messages on one stream instead. Each message carries the
//! assertion and trace context a call would carry in its metadata, and is
//! checked and traced the same way; appends from many calls run at once,
//! so the committer's batches fill as they do for unary calls.
//!
//! The rule the edge relies on: the stream ends cleanly (status OK) only
//! after answering every message it read. A message still unanswered at a
//! clean end was never read, so never appended, and may be sent again on
//! another stream. The stream ends that way when the caller closes its
//! side and when the server shuts down (so draining can finish).

use crate::calls;
use crate::service::SessionService;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use ithaca_kit::error::domain_code;
use ithaca_kit::principal::{InternalKey, Principal};
use ithaca_kit::propagation;
use ithaca_proto::service_names::SESSION;
use ithaca_proto::session::v1 as pb;
use ithaca_proto::session::v1::streamed_append::Work;
use std::pin::Pin;
use std::time::Duration;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};
use tracing::Instrument;

/// Appends one stream has in flight at most: past it the stream is read
/// no further until one finishes (HTTP/2 flow control then holds the
/// sender).
pub const IN_FLIGHT: usize = 512;

/// The longest an append of the stream may take, whatever its deadline
/// says: what a message without one gets.
const MAX_DEADLINE: Duration = Duration::from_secs(60);

/// The answers of one `AppendEvents` stream.
pub type Answers = Pin<Box<dyn Stream<Item = Result<pb::StreamedAppendAnswer, Status>> + Send>>;

/// Serve one stream: read its messages, append each as its own principal,
/// answer each once it is durable or refused.
pub fn serve(
    service: SessionService,
    key: InternalKey,
    mut inbound: Streaming<pb::StreamedAppend>,
) -> Answers {
    let (tx, rx) = tokio::sync::mpsc::channel(IN_FLIGHT);
    let shutdown = service.shutdown().clone();
    // Should the loop ever panic, the stream must not end cleanly: that
    // would tell the caller its unanswered messages were never read. The
    // watcher holds a sender, so the stream ends only after it has spoken.
    let watcher = tx.clone();
    let serving = tokio::spawn(async move {
        let mut running = FuturesUnordered::new();
        let mut reading = true;
        loop {
            tokio::select! {
                // Answers first: they free room and their callers wait.
                biased;
                Some(answer) = running.next(), if !running.is_empty() => {
                    if tx.send(Ok(answer)).await.is_err() {
                        // The caller hung up; nobody hears the rest.
                        return;
                    }
                }
                () = shutdown.cancelled(), if reading => reading = false,
                message = inbound.next(), if reading && running.len() < IN_FLIGHT => {
                    match message {
                        Some(Ok(message)) => running.push(handle(&service, &key, message)),
                        Some(Err(status)) => {
                            tracing::debug!(error = %status.message(), "append stream broke");
                            reading = false;
                        }
                        None => reading = false,
                    }
                }
                else => {}
            }
            if !reading && running.is_empty() {
                // Every message read has its answer: a clean end.
                return;
            }
        }
    });
    tokio::spawn(async move {
        if let Err(failed) = serving.await {
            tracing::error!(error = %failed, "an append stream failed");
            let _ = watcher
                .send(Err(Status::internal(
                    "the append stream failed; whether its unanswered messages were appended is unknown",
                )))
                .await;
        }
    });
    Box::pin(ReceiverStream::new(rx))
}

/// One message: its assertion checked, its work (an append, or a
/// `BeginCall`) run inside a server span of its own (named as the unary
/// call's, a child of the message's trace context, so the trace reads as
/// it did), its answer built.
async fn handle(
    service: &SessionService,
    key: &InternalKey,
    message: pb::StreamedAppend,
) -> pb::StreamedAppendAnswer {
    let id = message.id;
    let method = match message.work {
        Some(Work::BeginCall(_)) => "BeginCall",
        _ => "AppendEvent",
    };
    let span = propagation::message_span(SESSION, method, &message.traceparent);
    let deadline = match message.deadline_ms {
        0 => MAX_DEADLINE,
        ms => Duration::from_millis(ms).min(MAX_DEADLINE),
    };
    let done = async {
        let caller = verify(key, &message.assertion)?;
        match message.work {
            Some(Work::Append(append)) => {
                let row = calls::append(service, &caller, append).await?;
                Ok((row.seq, None))
            }
            Some(Work::BeginCall(begin)) => {
                let (session, seq, notice) = calls::begin(service, &caller, begin).await?;
                let session = pb::CallSession {
                    session_id: session.session_id.into(),
                    subject_kind: session.subject_kind,
                    subject_id: session.subject_id,
                    notice,
                };
                Ok((seq, Some(session)))
            }
            None => Err(Status::invalid_argument(
                "work: an append or a begin_call is required",
            )),
        }
    };
    let outcome = match tokio::time::timeout(deadline, done.instrument(span)).await {
        Ok(outcome) => outcome,
        Err(_) => Err(Status::deadline_exceeded(format!(
            "{SESSION} did not finish the work within its deadline of {} ms",
            deadline.as_millis()
        ))),
    };
    match outcome {
        Ok((seq, session)) => pb::StreamedAppendAnswer {
            id,
            seq,
            session,
            ..Default::default()
        },
        Err(status) => pb::StreamedAppendAnswer {
            id,
            code: status.code() as i32,
            message: status.message().to_owned(),
            domain_code: domain_code(&status).unwrap_or_default().to_owned(),
            ..Default::default()
        },
    }
}

/// The principal of a message's assertion, refused as a call's would be.
fn verify(key: &InternalKey, assertion: &str) -> Result<Principal, Status> {
    key.verify(assertion).map_err(|err| {
        tracing::debug!(error = %err, "refused a streamed append");
        Status::unauthenticated(err.to_string())
    })
}
