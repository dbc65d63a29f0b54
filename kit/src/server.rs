//! Serving gRPC: a service's routes plus the standard health service and
//! server reflection, on a listener the caller bound (so tests can bind port
//! 0), until the shutdown token is cancelled. A handler that panics answers
//! INTERNAL ([`crate::panic`]) and the server goes on serving.

use crate::quiet_unix::QuietUnix;
use futures::StreamExt;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, UnixListener, UnixStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::service::Routes;
use tonic::transport::Server;
use tonic::transport::server::{Connected, TcpConnectInfo, TcpIncoming};
use tonic_health::ServingStatus;

/// How long in-flight calls may take to finish after shutdown begins.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// What one gRPC server runs.
pub struct ServeOptions {
    /// Fully qualified names of the services in `routes`, reported by the
    /// health service as SERVING while the server runs.
    pub service_names: Vec<&'static str>,
    /// The services themselves (already wrapped in the principal verifier).
    pub routes: Routes,
    /// The service's background tasks (a worker, a listener). They stop on
    /// the same shutdown signal; `serve` returns only after they finished
    /// (within the drain bound), so no task is cut off mid-write.
    pub background: TaskTracker,
    /// The service's database, when its health should follow the schema:
    /// SERVING only while the applied migrations are exactly this binary's
    /// (checked every [`SCHEMA_CHECK_INTERVAL`]). A rolling upgrade's new
    /// version migrates, and the old version's replicas then report
    /// NOT_SERVING, so their readiness probes take them out of rotation:
    /// two versions do not serve on one schema.
    pub schema: Option<crate::db::Db>,
}

/// How often a server with [`ServeOptions::schema`] compares the database's
/// migrations with its own.
pub const SCHEMA_CHECK_INTERVAL: Duration = Duration::from_secs(5);

impl ServeOptions {
    /// A service with no background tasks.
    pub fn new(service_names: Vec<&'static str>, routes: Routes) -> Self {
        ServeOptions {
            service_names,
            routes,
            background: TaskTracker::new(),
            schema: None,
        }
    }
}

/// The server failed.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("grpc transport: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
}

/// Where a server accepts connections: its TCP port, and beside it (or
/// instead of it) a unix socket for callers on the same host, which reach
/// it with a `unix:<path>` URL ([`crate::client::channel`]) and skip the
/// TCP stack on every message.
#[derive(Debug)]
pub struct Listener {
    tcp: Option<TcpListener>,
    unix: Option<UnixSocket>,
}

impl Listener {
    /// Only a unix socket.
    pub fn unix(socket: UnixSocket) -> Self {
        Listener {
            tcp: None,
            unix: Some(socket),
        }
    }

    /// This listener and a unix socket beside it.
    pub fn with_unix(mut self, socket: UnixSocket) -> Self {
        self.unix = Some(socket);
        self
    }

    /// Every connection either listener accepts, for
    /// `serve_with_incoming` (TCP ones with `TCP_NODELAY`), each closed
    /// gently ([`Conn`]) by a task that `lingering` tracks.
    pub fn incoming(self, lingering: TaskTracker) -> impl futures::Stream<Item = io::Result<Conn>> {
        // TCP_NODELAY: a response's trailers are a separate small write;
        // with Nagle on they wait for the peer's delayed ACK (40 ms on
        // Linux).
        let tcp = self.tcp.map(|l| {
            TcpIncoming::from(l)
                .with_nodelay(Some(true))
                .map(|accepted| {
                    accepted.map(|stream| {
                        let peer = stream.connect_info();
                        (Box::new(stream) as Box<dyn Io>, peer)
                    })
                })
        });
        let unix = self.unix.map(|l| {
            futures::stream::unfold(l, |l| async move {
                let accepted = l.listener.accept().await;
                let accepted = match accepted.and_then(|(stream, _)| QuietUnix::new(stream)) {
                    Ok(stream) => {
                        let peer = TcpConnectInfo {
                            local_addr: None,
                            remote_addr: None,
                        };
                        Ok((Box::new(stream) as Box<dyn Io>, peer))
                    }
                    Err(error) => {
                        // tonic asks for the next connection at once: a
                        // lack of file descriptors is waited out here
                        // instead of spun on.
                        tracing::warn!(%error, path = %l.path.display(), "accepting a connection on the unix socket failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        Err(error)
                    }
                };
                Some((accepted, l))
            })
        });
        futures::stream::select(
            futures::stream::iter(tcp).flatten(),
            futures::stream::iter(unix).flatten(),
        )
        .map(move |accepted| accepted.map(|(io, peer)| Conn::new(io, peer, lingering.clone())))
    }
}

impl From<TcpListener> for Listener {
    fn from(listener: TcpListener) -> Self {
        Listener {
            tcp: Some(listener),
            unix: None,
        }
    }
}

/// A unix socket a server listens on; its file is removed when the server
/// stops (when this is dropped).
#[derive(Debug)]
pub struct UnixSocket {
    listener: UnixListener,
    path: PathBuf,
}

impl UnixSocket {
    /// Bind `path`. A file left there by a server that is gone (nothing
    /// answers on it) is replaced; one a live server answers on, or a file
    /// that is not a socket, is an error naming the path.
    pub async fn bind(path: &Path) -> io::Result<Self> {
        use std::os::unix::fs::FileTypeExt;
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            let in_use = |what: &str| {
                io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("{}: {what}", path.display()),
                )
            };
            if !meta.file_type().is_socket() {
                return Err(in_use("exists and is not a socket"));
            }
            if UnixStream::connect(path).await.is_ok() {
                return Err(in_use("another server listens on this socket"));
            }
            std::fs::remove_file(path)?;
        }
        let listener = UnixListener::bind(path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        Ok(UnixSocket {
            listener,
            path: path.to_owned(),
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The URL callers on this host reach it by (`unix:<path>`).
    pub fn url(&self) -> String {
        format!("{}{}", crate::client::UNIX_SCHEME, self.path.display())
    }
}

impl Drop for UnixSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// How long a finished connection keeps reading what its peer still sends
/// before the socket is let go (see [`Conn`]).
pub const LINGER: Duration = Duration::from_secs(2);

/// What a connection reads and writes through: a TCP stream or a
/// [`QuietUnix`] socket.
trait Io: AsyncRead + AsyncWrite + Send + Unpin + std::fmt::Debug {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + std::fmt::Debug> Io for T {}

/// One accepted connection, over TCP or a unix socket, closed gently.
///
/// When the server is done with a connection (a graceful shutdown's last
/// answer written), the peer may still be sending: messages on a stream
/// the server has stopped reading. Closing a socket with unread bytes makes
/// the kernel reset the connection (TCP sends RST; a unix socket's peer
/// reads ECONNRESET), and a peer that sees the reset before it has read the
/// answers already sent may fail them all: an append stream then reported
/// appends as in doubt that had been answered. So on drop the write side
/// is shut (the peer reads every answer, then the end), and what the peer
/// still sends is read and dropped until it closes too, for at most
/// [`LINGER`], in a task the listener's tracker holds.
#[derive(Debug)]
pub struct Conn {
    /// `None` only once dropped.
    io: Option<Box<dyn Io>>,
    peer: TcpConnectInfo,
    lingering: TaskTracker,
}

impl Conn {
    fn new(io: Box<dyn Io>, peer: TcpConnectInfo, lingering: TaskTracker) -> Self {
        Conn {
            io: Some(io),
            peer,
            lingering,
        }
    }

    fn io(self: Pin<&mut Self>) -> Pin<&mut dyn Io> {
        let io = self.get_mut().io.as_deref_mut();
        Pin::new(io.expect("a connection is open until dropped"))
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        let Some(mut io) = self.io.take() else {
            return;
        };
        // Outside a runtime (it is shutting down) there is nothing to
        // linger with: the socket closes as it would have.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        self.lingering.spawn_on(
            async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let _ = io.shutdown().await;
                let mut sink = [0u8; 4096];
                let _ = tokio::time::timeout(LINGER, async {
                    while let Ok(1..) = io.read(&mut sink).await {}
                })
                .await;
            },
            &runtime,
        );
    }
}

impl Connected for Conn {
    /// The TCP peer's addresses; none for a unix socket.
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.peer.clone()
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.io().poll_read(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.io().poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.io().poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.as_ref().is_some_and(|io| io.is_write_vectored())
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.io().poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.io().poll_shutdown(cx)
    }
}

/// Serve until `shutdown` is cancelled, then let in-flight calls finish for
/// at most [`DRAIN_TIMEOUT`].
pub async fn serve(
    listener: impl Into<Listener>,
    options: ServeOptions,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    let (reporter, health) = tonic_health::server::health_reporter();
    for name in &options.service_names {
        reporter
            .set_service_status(*name, ServingStatus::Serving)
            .await;
    }
    // Reflection lists exactly what this server answers: its own services,
    // health and reflection, not every service in the shared descriptor set.
    let mut reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(ithaca_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .with_service_name("grpc.health.v1.Health")
        .with_service_name("grpc.reflection.v1.ServerReflection");
    for name in &options.service_names {
        reflection = reflection.with_service_name(*name);
    }
    let reflection = reflection.build_v1()?;
    let routes = options.routes.add_service(health).add_service(reflection);

    if let Some(db) = options.schema.clone() {
        let reporter = reporter.clone();
        let names = options.service_names.clone();
        tokio::spawn(watch_schema(db, reporter, names, shutdown.clone()));
    }
    let stopping = shutdown.clone();
    let names = options.service_names.clone();
    let signal = async move {
        stopping.cancelled().await;
        // Tell load balancers and probes first, then stop accepting.
        for name in names {
            reporter
                .set_service_status(name, ServingStatus::NotServing)
                .await;
        }
    };
    let lingering = TaskTracker::new();
    let incoming = listener.into().incoming(lingering.clone());
    let server = Server::builder()
        .trace_fn(crate::propagation::server_span)
        // Around every route, so a panic anywhere below it (the principal
        // verifier, a handler) becomes a gRPC status, not a reset stream.
        .layer(crate::panic::CatchPanicLayer)
        .add_routes(routes)
        .serve_with_incoming_shutdown(incoming, signal);
    tokio::pin!(server);
    let background = options.background;
    background.close();
    let drained = async {
        let result = (&mut server).await;
        // The server stopped on the shutdown signal, which the background
        // tasks heard too: wait until they finished, and until the last
        // connections' peers have read their answers (bounded by LINGER).
        background.wait().await;
        lingering.close();
        lingering.wait().await;
        result
    };
    tokio::select! {
        result = drained => Ok(result?),
        _ = async { shutdown.cancelled().await; tokio::time::sleep(DRAIN_TIMEOUT).await } => {
            tracing::warn!(timeout_s = DRAIN_TIMEOUT.as_secs(), tasks = background.len(), "in-flight calls or background tasks did not finish in time; stopping anyway");
            Ok(())
        }
    }
}

/// Keep the health of `names` in step with the schema (see
/// [`ServeOptions::schema`]) until `shutdown`. A check that fails (the
/// database unreachable) changes nothing: the calls themselves report that.
async fn watch_schema(
    db: crate::db::Db,
    reporter: tonic_health::server::HealthReporter,
    names: Vec<&'static str>,
    shutdown: CancellationToken,
) {
    use crate::db::SchemaState;
    let mut serving = true;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(SCHEMA_CHECK_INTERVAL) => {}
        }
        let state = match db.schema_state().await {
            Ok(state) => state,
            Err(error) => {
                tracing::debug!(%error, "checking the schema version failed");
                continue;
            }
        };
        let current = state == SchemaState::Current;
        if current == serving || shutdown.is_cancelled() {
            continue;
        }
        if current {
            tracing::info!("the schema matches this version again; serving");
        } else {
            tracing::warn!(
                ?state,
                "the database schema is not this version's; reporting NOT_SERVING until it is"
            );
        }
        let status = if current {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        for name in &names {
            reporter.set_service_status(*name, status).await;
        }
        serving = current;
    }
}
