//! The HTTP listener of the edge (and of the console beside it): hyper
//! connections with the limits a public listener needs, which
//! `axum::serve` does not set.
//!
//! - **A cap on connections.** At most [`Limits::max_connections`] are
//!   served at once; one more is answered `503` with `Retry-After` and
//!   closed at once, so a flood of idle sockets cannot exhaust the
//!   process's file descriptors or memory.
//! - **Header timeout.** A request's headers must be in within
//!   [`Limits::header_timeout`]: from when a new connection was accepted,
//!   and on a kept-alive HTTP/1.1 connection from the first byte of the
//!   next request (partial headers need no authentication, so they are the
//!   cheapest attack to mount). hyper's own HTTP/1 header timer is not
//!   used: it also runs while a kept-alive connection waits for its next
//!   request, which would close every idle connection at the header
//!   timeout instead of the idle timeout.
//! - **Body timeout.** The whole request body must arrive within
//!   [`Limits::body_timeout`] of its headers, however it is trickled; the
//!   handler reading it gets a [`BodyTimeout`] error (the edge answers 408).
//! - **Idle timeout.** A connection with no request in flight for
//!   [`Limits::idle_timeout`] is closed. A streaming response (the SSE trace
//!   stream) is a request in flight, so it is never idle.
//! - **An answer before the body closes the connection, and says so.** A
//!   request refused before its body was read (a 401, 403, 413, 429) gets
//!   `Connection: close`: hyper drops such a connection rather than read
//!   the rest, and a client that was not told would send its next request
//!   down a socket about to close ("server disconnected without sending a
//!   response"), which is how OAuth clients meet their first 401.

mod io;

use axum::Router;
use axum::body::Body;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use io::{DeadlineBody, Guarded, Watched};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

/// The limits of one listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// How long a client may take to send a request's headers (for a new
    /// connection: from the moment it was accepted).
    pub header_timeout: Duration,
    /// How long a client may take to send a request's whole body, from the
    /// end of its headers.
    pub body_timeout: Duration,
    /// How long a connection may stay open with no request in flight.
    pub idle_timeout: Duration,
    /// Connections served at once; more are refused.
    pub max_connections: usize,
}

impl Limits {
    pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
    pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);
    pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);
    pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_timeout: Self::DEFAULT_HEADER_TIMEOUT,
            body_timeout: Self::DEFAULT_BODY_TIMEOUT,
            idle_timeout: Self::DEFAULT_IDLE_TIMEOUT,
            max_connections: Self::DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// A request body did not arrive in time. Reading the body fails with
/// this (somewhere in the error's source chain; see [`is_body_timeout`]).
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {} ms", .0.as_millis())]
pub struct BodyTimeout(pub Duration);

/// Whether `error` or anything in its source chain is a [`BodyTimeout`].
pub fn is_body_timeout(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(e) = next {
        if e.is::<BodyTimeout>() {
            return true;
        }
        next = e.source();
    }
    false
}

/// What a refused connection reads before it is closed.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
content-type: text/plain; charset=utf-8\r\n\
retry-after: 1\r\n\
connection: close\r\n\
content-length: 34\r\n\
\r\n\
too many connections; retry later\n";

/// How long a connection told to close (idle, or shutting down) may take
/// to finish what it was writing before it is dropped.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// Serve `app` on `listener` within `limits` until `shutdown` is
/// cancelled; then stop accepting, let every connection finish its
/// requests in flight, and return when all are closed. (A caller bounds
/// that wait: a stream may never finish by itself.)
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: CancellationToken,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let connections = TaskTracker::new();
    let mut refusals = Refusals::default();
    loop {
        let (stream, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    accept_failed(&error).await;
                    continue;
                }
            },
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            refusals.count(limits.max_connections);
            refuse(&stream);
            continue;
        };
        // Small writes (a JSON answer, an SSE event) go out at once.
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            connection(stream, peer, app, limits, shutdown).await;
            drop(permit);
        });
    }
    connections.close();
    connections.wait().await;
}

/// An accept error: a connection that died in the backlog is nothing; a
/// lack of file descriptors is waited out instead of spun on.
async fn accept_failed(error: &std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        error.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        return;
    }
    tracing::warn!(%error, "accepting a connection failed");
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// Answer `503` without reading anything, then close. Best effort: the
/// kernel has room for these bytes on a fresh socket, and nothing here
/// waits for the client.
fn refuse(stream: &TcpStream) {
    let _ = stream.try_write(BUSY);
}

/// Refused connections, logged at most once every ten seconds.
#[derive(Default)]
struct Refusals {
    since_log: u64,
    logged_at: Option<Instant>,
}

impl Refusals {
    fn count(&mut self, limit: usize) {
        self.since_log += 1;
        let due = self
            .logged_at
            .is_none_or(|at| at.elapsed() >= Duration::from_secs(10));
        if due {
            tracing::warn!(
                refused = self.since_log,
                max_connections = limit,
                "connection limit reached; refusing connections"
            );
            self.since_log = 0;
            self.logged_at = Some(Instant::now());
        }
    }
}

/// Whether a connection is busy, and since when it is not.
#[derive(Clone, Copy, Debug)]
struct Activity {
    /// Requests whose response has not been sent in full.
    in_flight: usize,
    /// When the connection was accepted or its last request finished.
    since: Instant,
    /// Whether any request arrived on it.
    served: bool,
    /// When bytes of a request that has not been dispatched yet first
    /// arrived (HTTP/1 only: an idle HTTP/2 connection also receives
    /// pings and settings).
    head_since: Option<Instant>,
    /// Whether the client speaks HTTP/2 (prior knowledge).
    http2: bool,
}

/// Why a connection with no request in flight is closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expired {
    /// It served requests and then sent nothing for the idle timeout.
    Idle,
    /// A request's headers did not arrive within the header timeout.
    Headers,
}

impl Activity {
    /// When a connection with no request in flight must be closed, and why.
    fn deadline(&self, limits: &Limits) -> (Instant, Expired) {
        let waiting = if self.served {
            (self.since + limits.idle_timeout, Expired::Idle)
        } else {
            (self.since + limits.header_timeout, Expired::Headers)
        };
        match self.head_since {
            Some(at) if at + limits.header_timeout < waiting.0 => {
                (at + limits.header_timeout, Expired::Headers)
            }
            _ => waiting,
        }
    }
}

/// One request in flight on a connection; dropped with the response body.
struct Busy(Arc<watch::Sender<Activity>>);

impl Busy {
    fn start(activity: &Arc<watch::Sender<Activity>>) -> Busy {
        activity.send_modify(|a| {
            a.in_flight += 1;
            a.served = true;
            a.head_since = None;
        });
        Busy(activity.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.send_modify(|a| {
            a.in_flight = a.in_flight.saturating_sub(1);
            if a.in_flight == 0 {
                a.since = Instant::now();
            }
        });
    }
}

async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    app: Router,
    limits: Limits,
    shutdown: CancellationToken,
) {
    let (activity, mut watch) = watch::channel(Activity {
        in_flight: 0,
        since: Instant::now(),
        served: false,
        head_since: None,
        http2: false,
    });
    let activity = Arc::new(activity);
    let io = Watched {
        io: stream,
        activity: activity.clone(),
        first_read: true,
    };
    let service = hyper::service::service_fn(move |request: http::Request<Incoming>| {
        let busy = Busy::start(&activity);
        let http1 = request.version() < http::Version::HTTP_2;
        let (parts, body) = request.into_parts();
        let body = DeadlineBody::new(body, limits.body_timeout);
        let read = body.read();
        let mut request = http::Request::from_parts(parts, Body::new(body));
        // Who is calling, as `axum::serve` with connect info records it:
        // failed key checks are throttled per client address.
        request
            .extensions_mut()
            .insert(axum::extract::ConnectInfo(peer));
        let app = app.clone();
        async move {
            let mut response = app
                .oneshot(request)
                .await
                .unwrap_or_else(|never| match never {});
            // Answered before the body was read (a 401, a 403, a 413):
            // hyper will close the connection rather than read what is
            // left, so the client is told, and does not send its next
            // request down a socket about to close.
            if http1 && !read.load(Ordering::Relaxed) {
                response.headers_mut().insert(
                    http::header::CONNECTION,
                    http::HeaderValue::from_static("close"),
                );
            }
            Ok::<_, Infallible>(response.map(|body| Body::new(Guarded { body, _busy: busy })))
        }
    });
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // The header timeout is ours (see the module docs), not hyper's.
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(None);
    builder.http2().timer(TokioTimer::new());
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
    tokio::pin!(conn);
    let mut closing = false;
    // Set when this side closes an expired connection: how long it may
    // take to finish writing. (On shutdown, the caller bounds the drain.)
    let mut grace: Option<Instant> = None;
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(error) = result {
                    tracing::debug!(%error, "connection ended with an error");
                }
                return;
            }
            _ = shutdown.cancelled(), if !closing => {
                conn.as_mut().graceful_shutdown();
                closing = true;
            }
            why = expired(&mut watch, limits), if !closing => {
                tracing::debug!(?why, "closing a connection");
                if why == Expired::Headers {
                    // Half a request and nothing to answer: just close.
                    return;
                }
                // Idle: tell an HTTP/2 client (GOAWAY) before closing.
                conn.as_mut().graceful_shutdown();
                closing = true;
                grace = Some(Instant::now() + CLOSE_GRACE);
            }
            _ = sleep_until_some(grace) => return,
        }
    }
}

async fn sleep_until_some(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Resolves when the connection has had no request in flight for too
/// long (see [`Activity::deadline`]); the reason.
async fn expired(watch: &mut watch::Receiver<Activity>, limits: Limits) -> Expired {
    loop {
        let now = *watch.borrow_and_update();
        if now.in_flight > 0 {
            if watch.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
            continue;
        }
        let (deadline, why) = now.deadline(&limits);
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => return why,
            changed = watch.changed() => {
                if changed.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        }
    }
}
