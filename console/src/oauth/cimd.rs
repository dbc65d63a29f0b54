//! Client ID Metadata Documents: a `client_id` that is an HTTPS URL names a
//! JSON document describing the client. It is fetched over TLS with a size
//! limit and a timeout, never from a private, loopback or link-local address
//! (the server must not become a probe of its own network), and remembered
//! for a few minutes so a busy consent page does not refetch it.
//!
//! The address is resolved once, checked, and connected to directly; TLS is
//! then spoken on that socket (rustls with ring, Mozilla's roots), naming
//! the URL's host for the certificate check. So a DNS answer that changes
//! between check and connect cannot reach an internal host, and the
//! certificate still has to be the named host's.
//!
//! Tests serve documents on loopback, which only [`Fetcher::allowing_private`]
//! permits: there plain HTTP is accepted too, and [`Fetcher::trusting`] adds
//! the test's own certificate to the roots. A normal fetcher does neither.

use super::redirect;
use rustls::pki_types::{CertificateDer, ServerName};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use url::Url;

/// The largest document accepted, in bytes.
pub const MAX_DOCUMENT_BYTES: usize = 5 * 1024;

/// How long resolving, connecting and reading may take together.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a fetched document is trusted before it is fetched again.
pub const CACHE_TTL: Duration = Duration::from_secs(300);

/// Entries beyond this are swept of stale ones.
const CACHE_MAX: usize = 1000;

/// What the consent page needs of a document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Document {
    pub client_name: String,
    pub redirect_uris: Vec<String>,
}

/// Fetches and remembers documents.
#[derive(Debug, Default)]
pub struct Fetcher {
    allow_private: bool,
    /// Certificates trusted beside Mozilla's roots (tests only).
    extra_roots: Vec<CertificateDer<'static>>,
    tls: OnceLock<Result<Arc<rustls::ClientConfig>, String>>,
    fetched: Mutex<HashMap<String, Instant>>,
}

impl Fetcher {
    /// A fetcher that also reads private and loopback addresses and plain
    /// HTTP: for tests only.
    pub fn allowing_private() -> Self {
        Fetcher {
            allow_private: true,
            ..Fetcher::default()
        }
    }

    /// Also trust these DER certificates as roots (a test's own). Only a
    /// fetcher [`allowing_private`](Self::allowing_private) takes them: a
    /// production fetcher trusts Mozilla's roots and nothing else.
    pub fn trusting(mut self, roots: Vec<Vec<u8>>) -> Self {
        if self.allow_private {
            self.extra_roots = roots.into_iter().map(CertificateDer::from).collect();
        }
        self
    }

    /// The TLS client configuration, made once.
    fn tls(&self) -> Result<Arc<rustls::ClientConfig>, String> {
        self.tls
            .get_or_init(|| {
                let mut roots = rustls::RootCertStore::empty();
                roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
                for cert in &self.extra_roots {
                    roots
                        .add(cert.clone())
                        .map_err(|e| format!("client_id: a test root is unusable: {e}"))?;
                }
                let config = rustls::ClientConfig::builder_with_provider(Arc::new(
                    rustls::crypto::ring::default_provider(),
                ))
                .with_safe_default_protocol_versions()
                .map_err(|e| format!("client_id: tls setup: {e}"))?
                .with_root_certificates(roots)
                .with_no_client_auth();
                Ok(Arc::new(config))
            })
            .clone()
    }

    /// Whether `client_id` was fetched within [`CACHE_TTL`].
    pub fn fresh(&self, client_id: &str) -> bool {
        self.fetched
            .lock()
            .ok()
            .and_then(|m| m.get(client_id).map(|at| at.elapsed() < CACHE_TTL))
            .unwrap_or(false)
    }

    /// Fetch and check the document at `client_id`.
    pub async fn fetch(&self, client_id: &str) -> Result<Document, String> {
        let document = tokio::time::timeout(FETCH_TIMEOUT, self.fetch_inner(client_id))
            .await
            .map_err(|_| {
                format!(
                    "client_id: the metadata document did not arrive within {} s",
                    FETCH_TIMEOUT.as_secs()
                )
            })??;
        if let Ok(mut m) = self.fetched.lock() {
            if m.len() >= CACHE_MAX {
                m.retain(|_, at| at.elapsed() < CACHE_TTL);
            }
            m.insert(client_id.to_owned(), Instant::now());
        }
        Ok(document)
    }

    async fn fetch_inner(&self, client_id: &str) -> Result<Document, String> {
        let url = Url::parse(client_id).map_err(|e| format!("client_id: not a URL ({e})"))?;
        if url.fragment().is_some() || !url.username().is_empty() || url.password().is_some() {
            return Err("client_id: a metadata URL has no fragment or credentials".to_owned());
        }
        if url.path() == "/" || url.path().is_empty() {
            return Err("client_id: a metadata URL needs a path".to_owned());
        }
        let host = url
            .host_str()
            .ok_or("client_id: a metadata URL needs a host")?;
        let port = url
            .port_or_known_default()
            .ok_or("client_id: no port for this scheme")?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
            .await
            .map_err(|e| format!("client_id: cannot resolve {host}: {e}"))?
            .collect();
        let Some(addr) = addrs.first().copied() else {
            return Err(format!("client_id: {host} has no address"));
        };
        if !self.allow_private && addrs.iter().any(|a| !is_public(a.ip())) {
            return Err(format!(
                "client_id: {host} resolves to a private, loopback or link-local address; \
                 metadata documents are fetched only from public addresses"
            ));
        }
        let body = match url.scheme() {
            "https" => {
                let name = ServerName::try_from(host.to_owned())
                    .map_err(|_| format!("client_id: {host} is not a valid server name"))?;
                let connector = tokio_rustls::TlsConnector::from(self.tls()?);
                let stream = connect(addr).await?;
                let tls = connector
                    .connect(name, stream)
                    .await
                    .map_err(|e| format!("client_id: tls with {host} failed: {e}"))?;
                get(tls, &url).await?
            }
            "http" if self.allow_private => get(connect(addr).await?, &url).await?,
            _ => return Err("client_id: a metadata URL must be https".to_owned()),
        };
        parse(client_id, &body)
    }
}

/// A TCP connection to the address that was checked.
async fn connect(addr: SocketAddr) -> Result<tokio::net::TcpStream, String> {
    tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("client_id: cannot connect: {e}"))
}

/// One `GET` over HTTP/1.0 (so the body is never chunked), reading at most
/// the document limit plus room for the head. A TLS peer that closes
/// without `close_notify` is accepted only when the body is as long as its
/// `Content-Length` says (so a cut document is never taken for a whole one).
async fn get<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    url: &Url,
) -> Result<Vec<u8>, String> {
    let path = match url.query() {
        Some(q) => format!("{}?{q}", url.path()),
        None => url.path().to_owned(),
    };
    let host = url.host_str().unwrap_or_default();
    let head = format!(
        "GET {path} HTTP/1.0\r\nHost: {host}\r\nAccept: application/json\r\nUser-Agent: ithaca\r\n\r\n"
    );
    stream
        .write_all(head.as_bytes())
        .await
        .map_err(|e| format!("client_id: cannot send the request: {e}"))?;
    let cap = MAX_DOCUMENT_BYTES + 8 * 1024;
    let mut raw = Vec::new();
    let mut clean_end = true;
    if let Err(e) = (&mut stream)
        .take(cap as u64 + 1)
        .read_to_end(&mut raw)
        .await
    {
        if e.kind() != std::io::ErrorKind::UnexpectedEof {
            return Err(format!("client_id: cannot read the document: {e}"));
        }
        clean_end = false;
    }
    let read = raw.len();
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("client_id: the response has no complete head")?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    if status != "200" {
        return Err(format!(
            "client_id: fetching the document answered {status}"
        ));
    }
    let body = raw[split + 4..].to_vec();
    if body.len() > MAX_DOCUMENT_BYTES || read > cap {
        return Err(format!(
            "client_id: the metadata document is larger than {MAX_DOCUMENT_BYTES} bytes"
        ));
    }
    if !clean_end {
        let length = head.lines().find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.trim()
                .eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())
                .flatten()
        });
        if length != Some(body.len()) {
            return Err("client_id: the connection was cut before the document ended".to_owned());
        }
    }
    Ok(body)
}

/// Check a document: its `client_id` is the URL it came from, and its
/// redirect URIs pass [`redirect::check`].
fn parse(client_id: &str, body: &[u8]) -> Result<Document, String> {
    let doc: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| format!("client_id: the metadata document is not JSON ({e})"))?;
    if doc["client_id"].as_str() != Some(client_id) {
        return Err("client_id: the document's client_id is not its own URL".to_owned());
    }
    let uris: Vec<String> = doc["redirect_uris"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    if uris.is_empty() || uris.len() > 10 {
        return Err("client_id: the document needs 1 to 10 redirect_uris".to_owned());
    }
    for uri in &uris {
        redirect::check(uri)?;
    }
    if let Some(method) = doc["token_endpoint_auth_method"].as_str()
        && method != "none"
    {
        return Err(format!(
            "client_id: token_endpoint_auth_method {method:?} is not supported (only none)"
        ));
    }
    let name: String = doc["client_name"]
        .as_str()
        .unwrap_or_default()
        .chars()
        .take(200)
        .collect();
    Ok(Document {
        client_name: name,
        redirect_uris: uris,
    })
}

/// Whether an address is on the public internet: not loopback, private,
/// link-local, shared (CGNAT), unique-local, multicast or unspecified.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => {
            let o = a.octets();
            !(a.is_private()
                || a.is_loopback()
                || a.is_link_local()
                || a.is_broadcast()
                || a.is_documentation()
                || a.is_unspecified()
                || a.is_multicast()
                || o[0] == 0
                || o[0] >= 240
                || (o[0] == 100 && (o[1] & 0xc0) == 64))
        }
        IpAddr::V6(a) => {
            if let Some(v4) = a.to_ipv4_mapped() {
                return is_public(IpAddr::V4(v4));
            }
            let s0 = a.segments()[0];
            !(a.is_loopback()
                || a.is_unspecified()
                || a.is_multicast()
                || (s0 & 0xfe00) == 0xfc00
                || (s0 & 0xffc0) == 0xfe80)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_public_addresses_are_public() {
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
        ] {
            assert!(!is_public(private.parse().expect("ip")), "{private}");
        }
        for public in ["93.184.216.34", "2606:4700::1111"] {
            assert!(is_public(public.parse().expect("ip")), "{public}");
        }
    }

    #[tokio::test]
    async fn refuses_loopback_unless_allowed() {
        let f = Fetcher::default();
        let err = f
            .fetch("https://127.0.0.1:9/client.json")
            .await
            .expect_err("loopback");
        assert!(err.contains("private"), "{err}");
    }

    #[test]
    fn a_document_must_name_itself_and_safe_redirects() {
        let id = "https://app.example/client.json";
        let ok = format!(
            r#"{{"client_id":"{id}","client_name":"App","redirect_uris":["https://app.example/cb"]}}"#
        );
        assert_eq!(
            parse(id, ok.as_bytes()).expect("ok").redirect_uris,
            vec!["https://app.example/cb"]
        );
        let other = r#"{"client_id":"https://evil.example/c.json","redirect_uris":["https://app.example/cb"]}"#;
        assert!(parse(id, other.as_bytes()).is_err());
        let open = format!(r#"{{"client_id":"{id}","redirect_uris":["http://evil.example/cb"]}}"#);
        assert!(parse(id, open.as_bytes()).is_err());
    }
}
