//! Calling another service: a lazily connected channel and an interceptor
//! that attaches the principal assertion and the W3C trace context.

use crate::principal::{InternalKey, Principal};
use std::time::Duration;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Status};

/// The URL is not a usable gRPC endpoint.
#[derive(Debug, thiserror::Error)]
#[error("invalid service url {url:?}: {source}")]
pub struct BadUrl {
    url: String,
    source: tonic::transport::Error,
}

/// A channel to `url` (`http://host:port`) that connects on first use and
/// reconnects after failures, with a connect timeout so an unreachable
/// service fails fast instead of hanging.
pub fn channel(url: &str) -> Result<Channel, BadUrl> {
    let endpoint = Endpoint::from_shared(url.to_owned()).map_err(|source| BadUrl {
        url: url.to_owned(),
        source,
    })?;
    Ok(endpoint
        .connect_timeout(Duration::from_secs(3))
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(30))
        .connect_lazy())
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
