//! The stream itself: the slot that holds the open one (or says the
//! service has none), the waiters by id, and the task that reads answers
//! and settles every waiter when the stream ends.

use crate::backend::Backend;
use ithaca_kit::principal::{InternalKey, Principal};
use ithaca_proto::service_names::SESSION;
use ithaca_proto::session::v1 as spb;
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

/// The stream of one session backend, shared by every sender.
pub(super) struct Shared {
    pub(super) backend: Backend,
    pub(super) key: InternalKey,
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
pub(super) struct Open {
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

pub(super) enum Reply {
    Answer(spb::StreamedAppendAnswer),
    /// The stream ended cleanly without reading the message.
    Unread,
    /// The stream broke: whether the message was appended is unknown.
    Broken(Status),
}

/// A message's place among the waiters: its answer, and its entry taken
/// back when the append gives up before the answer came (its deadline).
pub(super) struct Ticket {
    pub(super) answer: oneshot::Receiver<Reply>,
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
    pub(super) fn send(&self, mut message: spb::StreamedAppend) -> Option<Ticket> {
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
    pub(super) fn new(backend: Backend, key: InternalKey) -> Self {
        Shared {
            backend,
            key,
            slot: Mutex::new(Slot::Closed),
            opening: tokio::sync::Mutex::new(()),
        }
    }

    /// The open stream, opened now if there is none; `None` when the
    /// service has no stream.
    pub(super) async fn stream(self: &Arc<Self>) -> Result<Option<Arc<Open>>, Status> {
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
