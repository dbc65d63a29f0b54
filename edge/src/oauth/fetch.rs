//! GETs of an issuer's metadata and keys: a deadline, a size cap, no
//! redirects, and plain HTTP only to loopback (a test's issuer, or an
//! identity provider beside the edge on the same machine).

use http_body_util::{BodyExt, Empty, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use std::time::Duration;

/// The largest metadata document or JWKS read.
pub const MAX_BODY: usize = 256 * 1024;

/// How long one GET may take, connection included.
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// Why a GET failed.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("{0}")]
    Url(String),
    #[error("answered HTTP {0}")]
    Status(u16),
    #[error("no answer within {} s", TIMEOUT.as_secs())]
    Timeout,
    #[error("larger than {MAX_BODY} bytes")]
    TooLarge,
    #[error("{0}")]
    Transport(String),
}

/// An HTTP(S) client for issuers.
#[derive(Clone)]
pub struct Fetcher {
    client: Client<HttpsConnector<HttpConnector>, Empty<bytes::Bytes>>,
}

impl Fetcher {
    /// A client with Mozilla's roots; `http://` is still possible (and
    /// [`check_url`] keeps it to loopback).
    pub fn new() -> Result<Self, FetchError> {
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())
            .map_err(|e| FetchError::Transport(format!("tls setup: {e}")))?
            .https_or_http()
            .enable_http1()
            .build();
        Ok(Fetcher {
            client: Client::builder(hyper_util::rt::TokioExecutor::new()).build(https),
        })
    }
}

impl Fetcher {
    /// GET `url` and return its body (a 200 only).
    pub async fn get(&self, url: &str) -> Result<bytes::Bytes, FetchError> {
        check_url(url).map_err(FetchError::Url)?;
        let uri: http::Uri = url
            .parse()
            .map_err(|e| FetchError::Url(format!("{url}: {e}")))?;
        let request = http::Request::get(uri)
            .header(http::header::ACCEPT, "application/json")
            .header(http::header::USER_AGENT, "ithaca-edge")
            .body(Empty::new())
            .map_err(|e| FetchError::Url(e.to_string()))?;
        let work = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|e| FetchError::Transport(e.to_string()))?;
            if response.status() != http::StatusCode::OK {
                return Err(FetchError::Status(response.status().as_u16()));
            }
            let body = Limited::new(response.into_body(), MAX_BODY)
                .collect()
                .await
                .map_err(|e| {
                    if e.is::<http_body_util::LengthLimitError>() {
                        FetchError::TooLarge
                    } else {
                        FetchError::Transport(e.to_string())
                    }
                })?;
            Ok(body.to_bytes())
        };
        tokio::time::timeout(TIMEOUT, work)
            .await
            .map_err(|_| FetchError::Timeout)?
    }
}

/// Whether `url` may be fetched: `https://`, or `http://` to a loopback
/// host. Anything else would let a network attacker hand the edge keys.
pub fn check_url(url: &str) -> Result<(), String> {
    if let Some(rest) = url.strip_prefix("http://") {
        let host = rest.split(['/', '?', '#']).next().unwrap_or("");
        let name = match host.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or(""),
            None => host.rsplit_once(':').map_or(host, |(h, _)| h),
        };
        let loopback = name == "localhost"
            || name
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        if loopback {
            return Ok(());
        }
        return Err(format!(
            "{url}: plain http is allowed only to loopback; use https"
        ));
    }
    if url.starts_with("https://") && url.len() > "https://".len() {
        return Ok(());
    }
    Err(format!("{url}: expected an https:// URL"))
}

#[cfg(test)]
mod tests {
    use super::check_url;

    #[test]
    fn only_https_or_loopback_http_is_fetched() {
        for ok in [
            "https://id.example/realms/x",
            "http://127.0.0.1:8443/jwks",
            "http://localhost:9000",
            "http://[::1]:80/x",
        ] {
            assert!(check_url(ok).is_ok(), "{ok}");
        }
        for bad in [
            "http://id.example/jwks",
            "http://10.0.0.1/jwks",
            "http://127.0.0.1.evil.example/",
            "ftp://id.example",
            "https://",
            "id.example",
        ] {
            assert!(check_url(bad).is_err(), "{bad}");
        }
    }
}
