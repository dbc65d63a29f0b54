//! The listener's wrappers around a connection: the socket that notes
//! when a request's first bytes arrive, the request body with a deadline,
//! and the response body that keeps its request counted as in flight.

use super::{Activity, BodyTimeout, Busy};
use axum::body::Body;
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::{Instant, Sleep};

/// The connection's socket, noting when a new request's first bytes
/// arrive so the header timeout can start then.
pub(super) struct Watched {
    pub(super) io: TcpStream,
    pub(super) activity: Arc<watch::Sender<Activity>>,
    pub(super) first_read: bool,
}

/// How an HTTP/2 client with prior knowledge opens a connection.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n";

impl Watched {
    fn arrived(&mut self, bytes: &[u8]) {
        if std::mem::take(&mut self.first_read) {
            let n = bytes.len().min(H2_PREFACE.len());
            if bytes[..n] == H2_PREFACE[..n] {
                self.activity.send_modify(|a| a.http2 = true);
                return;
            }
        }
        let now = *self.activity.borrow();
        if now.in_flight == 0 && now.head_since.is_none() && !now.http2 {
            self.activity
                .send_modify(|a| a.head_since = Some(Instant::now()));
        }
    }
}

impl tokio::io::AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let poll = Pin::new(&mut this.io).poll_read(cx, buf);
        if matches!(poll, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.arrived(&buf.filled()[before..]);
        }
        poll
    }
}

impl tokio::io::AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// A request body that fails with [`BodyTimeout`] unless it is complete
/// by its deadline, and notes in [`DeadlineBody::read`] whether it was
/// read to its end.
pub(super) struct DeadlineBody {
    inner: Incoming,
    deadline: Pin<Box<Sleep>>,
    timeout: Duration,
    read: Arc<AtomicBool>,
}

impl DeadlineBody {
    pub(super) fn new(inner: Incoming, timeout: Duration) -> Self {
        let read = Arc::new(AtomicBool::new(http_body::Body::is_end_stream(&inner)));
        DeadlineBody {
            inner,
            deadline: Box::pin(tokio::time::sleep(timeout)),
            timeout,
            read,
        }
    }

    /// True once the body has been read to its end (at once for a request
    /// without one). Still false after the handler answered means the
    /// answer came before the body: hyper then closes the connection
    /// unless the rest happened to be buffered already, so the listener
    /// says `Connection: close` (see `connection` in `mod.rs`).
    pub(super) fn read(&self) -> Arc<AtomicBool> {
        self.read.clone()
    }
}

impl http_body::Body for DeadlineBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            if frame.is_none() || this.inner.is_end_stream() {
                this.read.store(true, Ordering::Relaxed);
            }
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        if this.deadline.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(Box::new(BodyTimeout(this.timeout)))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A response body that keeps its request counted as in flight until it
/// has been sent or dropped.
pub(super) struct Guarded {
    pub(super) body: Body,
    pub(super) _busy: Busy,
}

impl http_body::Body for Guarded {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
