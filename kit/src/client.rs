//! Calling another service: a lazily connected channel and an interceptor
//! that attaches the principal assertion and the W3C trace context.

use crate::principal::{InternalKey, Principal};
use hyper_util::rt::TokioIo;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tonic::transport::{Channel, Endpoint, Uri};
use tonic::{Request, Status};

/// The URL is not a usable gRPC endpoint.
#[derive(Debug, thiserror::Error)]
#[error("invalid service url {url:?}: {reason}")]
pub struct BadUrl {
    url: String,
    reason: String,
}

/// The scheme of a service reached over a unix domain socket on this host:
/// `unix:/run/ithaca/session.sock`.
pub const UNIX_SCHEME: &str = "unix:";

/// A channel to `url` that connects on first use and reconnects after
/// failures, with a connect timeout so an unreachable service fails fast
/// instead of hanging. `url` is `http://host:port` (TCP), or `unix:<path>`
/// for a service on the same host listening on a unix socket: the same
/// gRPC over HTTP/2, without the TCP stack under it.
pub fn channel(url: &str) -> Result<Channel, BadUrl> {
    if let Some(path) = url.strip_prefix(UNIX_SCHEME) {
        return unix_channel(url, path);
    }
    let endpoint = Endpoint::from_shared(url.to_owned()).map_err(|source| BadUrl {
        url: url.to_owned(),
        reason: source.to_string(),
    })?;
    Ok(tuned(endpoint).tcp_nodelay(true).connect_lazy())
}

/// The settings every channel shares, whatever carries it.
fn tuned(endpoint: Endpoint) -> Endpoint {
    endpoint
        .connect_timeout(Duration::from_secs(3))
        .http2_keep_alive_interval(Duration::from_secs(30))
}

/// A channel to the unix socket at `path` (`url` is the whole flag value,
/// for the error).
fn unix_channel(url: &str, path: &str) -> Result<Channel, BadUrl> {
    let path = path.strip_prefix("//").unwrap_or(path);
    if path.is_empty() {
        return Err(BadUrl {
            url: url.to_owned(),
            reason: "no socket path after unix: (unix:/path/to/service.sock)".to_owned(),
        });
    }
    let path: Arc<PathBuf> = Arc::new(PathBuf::from(path));
    // The URI only names the :authority of each request; the connector
    // ignores it and opens the socket.
    let endpoint = tuned(Endpoint::from_static("http://localhost"));
    Ok(
        endpoint.connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
            let path = Arc::clone(&path);
            async move {
                let stream = crate::quiet_unix::QuietUnix::connect(path.as_path()).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        })),
    )
}

/// Client interceptor: every request gets a fresh assertion for a fixed
/// principal and the current trace context.
#[derive(Clone, Debug)]
pub struct Outbound {
    key: InternalKey,
    principal: Principal,
}

impl Outbound {
    pub fn new(key: InternalKey, principal: Principal) -> Self {
        Outbound { key, principal }
    }
}

impl tonic::service::Interceptor for Outbound {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        self.key.attach(request.metadata_mut(), &self.principal);
        crate::propagation::inject(request.metadata_mut());
        Ok(request)
    }
}
