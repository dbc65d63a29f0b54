//! One trusted issuer: its metadata (RFC 8414, or OpenID discovery) and
//! its JWKS, fetched over HTTP(S) and cached.
//!
//! The keys are read at start (in the background), lazily when the issuer
//! was down then (at most once per [`RETRY_AFTER`]), again when they are
//! older than [`MAX_AGE`] (a key the issuer withdrew stops verifying), and
//! on a token whose `kid` is unknown, since that is how a key rotation
//! looks. That last refresh is what anyone can trigger with a made-up
//! `kid`, so it happens at most once per [`Issuer::miss_interval`]: an
//! attacker's random kids cost the issuer one request per interval, not one
//! per token.

use super::fetch::{FetchError, Fetcher};
use super::jwt::Jwk;
use serde::Deserialize;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long fetched keys are used before they are fetched again.
pub const MAX_AGE: Duration = Duration::from_secs(15 * 60);

/// The shortest pause between two attempts to load an issuer that failed.
pub const RETRY_AFTER: Duration = Duration::from_secs(2);

/// The shortest pause between two refreshes caused by unknown `kid`s.
pub const MISS_INTERVAL: Duration = Duration::from_secs(30);

/// Why an issuer's keys are not at hand.
#[derive(Debug, thiserror::Error)]
pub enum IssuerError {
    #[error("fetching {what} of issuer {issuer}: {source}")]
    Fetch {
        issuer: String,
        what: &'static str,
        source: FetchError,
    },
    #[error("issuer {issuer}: {what}")]
    Metadata { issuer: String, what: String },
    #[error("issuer {0} is unavailable; retrying shortly")]
    Backoff(String),
}

/// A configured issuer and what is known of its keys.
pub struct Issuer {
    /// The issuer identifier exactly as configured; `iss` must equal it.
    pub url: String,
    fetcher: Fetcher,
    /// Serialises loads, so a burst of tokens makes one fetch.
    load: tokio::sync::Mutex<()>,
    state: Mutex<State>,
    /// See [`MISS_INTERVAL`]; a field so unit tests can shorten it.
    pub miss_interval: Duration,
}

#[derive(Default)]
struct State {
    jwks_uri: Option<String>,
    keys: Vec<Jwk>,
    /// When the keys were last fetched successfully.
    fetched: Option<Instant>,
    /// When a load was last attempted (success or not).
    attempted: Option<Instant>,
    /// When an unknown `kid` last caused a refresh.
    missed: Option<Instant>,
    /// Keys fetched so far (metrics and tests).
    fetches: u64,
}

#[derive(Deserialize)]
struct Metadata {
    issuer: String,
    jwks_uri: String,
}

#[derive(Deserialize)]
struct KeySet {
    keys: Vec<serde_json::Value>,
}

impl Issuer {
    pub fn new(url: String, fetcher: Fetcher) -> Self {
        Issuer {
            url,
            fetcher,
            load: tokio::sync::Mutex::new(()),
            state: Mutex::new(State::default()),
            miss_interval: MISS_INTERVAL,
        }
    }

    /// How many times the JWKS was fetched.
    pub fn fetches(&self) -> u64 {
        self.state.lock().map(|s| s.fetches).unwrap_or(0)
    }

    /// The keys that fit `alg` and `kid` (see [`Jwk::fits`]; maybe none),
    /// refreshing as the module doc says.
    pub async fn keys_for(&self, alg: &str, kid: Option<&str>) -> Result<Vec<Jwk>, IssuerError> {
        let (fresh, found) = self.cached(alg, kid);
        if fresh && !found.is_empty() {
            return Ok(found);
        }
        let _loading = self.load.lock().await;
        // Another request may have loaded while this one waited.
        let (fresh, found) = self.cached(alg, kid);
        if fresh && !found.is_empty() {
            return Ok(found);
        }
        let (loaded, recently_tried, recently_missed) = {
            let s = self.state.lock().map_err(|_| self.backoff())?;
            (
                s.fetched.is_some(),
                s.attempted.is_some_and(|t| t.elapsed() < RETRY_AFTER),
                s.missed.is_some_and(|t| t.elapsed() < self.miss_interval),
            )
        };
        if !loaded {
            if recently_tried {
                return Err(self.backoff());
            }
            self.load_now(false).await?;
        } else if !fresh {
            // Stale keys: refresh, but keep the old ones if the issuer is
            // down for a moment.
            if !recently_tried && let Err(error) = self.load_now(false).await {
                tracing::warn!(%error, "refreshing an issuer's keys failed; using the cached ones");
            }
        } else if !recently_missed {
            // Fresh keys, none fits: maybe a rotation. If the issuer cannot
            // be asked now, the token is simply not verified.
            if let Err(error) = self.load_now(true).await {
                tracing::warn!(%error, "refreshing an issuer's keys for an unknown kid failed");
            }
        }
        Ok(self.cached(alg, kid).1)
    }

    /// Load metadata and keys now (at start), unless a request is loading
    /// them already; a request arriving meanwhile waits for this load.
    pub async fn preload(&self) -> Result<(), IssuerError> {
        let _loading = self.load.lock().await;
        if self.state.lock().is_ok_and(|s| s.fetched.is_some()) {
            return Ok(());
        }
        self.load_now(false).await
    }

    /// Load metadata (once) and keys now; `miss` marks a refresh caused by
    /// an unknown kid. The caller holds `load`.
    async fn load_now(&self, miss: bool) -> Result<(), IssuerError> {
        let jwks_uri = {
            let mut s = self.state.lock().map_err(|_| self.backoff())?;
            s.attempted = Some(Instant::now());
            if miss {
                s.missed = Some(Instant::now());
            }
            s.jwks_uri.clone()
        };
        let jwks_uri = match jwks_uri {
            Some(uri) => uri,
            None => self.discover().await?,
        };
        let body = self
            .fetcher
            .get(&jwks_uri)
            .await
            .map_err(|source| IssuerError::Fetch {
                issuer: self.url.clone(),
                what: "the JWKS",
                source,
            })?;
        let set: KeySet = serde_json::from_slice(&body).map_err(|e| IssuerError::Metadata {
            issuer: self.url.clone(),
            what: format!("the JWKS at {jwks_uri} is not a JWK set: {e}"),
        })?;
        // Keys of kinds this server cannot use are skipped, not fatal: an
        // issuer may publish encryption keys or other curves beside.
        let keys: Vec<Jwk> = set
            .keys
            .into_iter()
            .filter_map(|k| serde_json::from_value(k).ok())
            .collect();
        tracing::info!(issuer = %self.url, keys = keys.len(), "issuer keys loaded");
        let mut s = self.state.lock().map_err(|_| self.backoff())?;
        s.jwks_uri = Some(jwks_uri);
        s.keys = keys;
        s.fetched = Some(Instant::now());
        s.fetches += 1;
        Ok(())
    }

    /// The issuer's `jwks_uri`, from its RFC 8414 metadata or, failing
    /// that, its OpenID configuration; the metadata's `issuer` must be the
    /// configured one (RFC 8414 §3.3), so a mix-up is caught at once.
    async fn discover(&self) -> Result<String, IssuerError> {
        let mut last = None;
        for url in metadata_urls(&self.url) {
            let body = match self.fetcher.get(&url).await {
                Ok(body) => body,
                Err(source) => {
                    last = Some(source);
                    continue;
                }
            };
            let metadata: Metadata =
                serde_json::from_slice(&body).map_err(|e| IssuerError::Metadata {
                    issuer: self.url.clone(),
                    what: format!("the metadata at {url} lacks issuer or jwks_uri: {e}"),
                })?;
            if metadata.issuer != self.url {
                return Err(IssuerError::Metadata {
                    issuer: self.url.clone(),
                    what: format!(
                        "the metadata at {url} names another issuer, {:?}",
                        metadata.issuer
                    ),
                });
            }
            super::fetch::check_url(&metadata.jwks_uri).map_err(|e| IssuerError::Metadata {
                issuer: self.url.clone(),
                what: format!("jwks_uri: {e}"),
            })?;
            return Ok(metadata.jwks_uri);
        }
        Err(IssuerError::Fetch {
            issuer: self.url.clone(),
            what: "the metadata",
            source: last.unwrap_or(FetchError::Status(404)),
        })
    }

    /// Whether the keys are fresh, and those that fit.
    fn cached(&self, alg: &str, kid: Option<&str>) -> (bool, Vec<Jwk>) {
        let Ok(s) = self.state.lock() else {
            return (false, Vec::new());
        };
        let fresh = s.fetched.is_some_and(|t| t.elapsed() < MAX_AGE);
        let found = s
            .keys
            .iter()
            .filter(|k| k.fits(alg, kid))
            .cloned()
            .collect();
        (fresh, found)
    }

    fn backoff(&self) -> IssuerError {
        IssuerError::Backoff(self.url.clone())
    }
}

/// Where an issuer's metadata may be: RFC 8414's well-known URI (inserted
/// between host and path), then OpenID discovery's (appended to the issuer).
pub fn metadata_urls(issuer: &str) -> Vec<String> {
    let issuer = issuer.trim_end_matches('/');
    let (scheme, rest) = issuer.split_once("://").unwrap_or(("https", issuer));
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    vec![
        format!("{scheme}://{host}/.well-known/oauth-authorization-server{path}"),
        format!("{issuer}/.well-known/openid-configuration"),
    ]
}

#[cfg(test)]
mod tests {
    use super::metadata_urls;

    #[test]
    fn metadata_is_looked_up_where_both_rfcs_put_it() {
        assert_eq!(
            metadata_urls("https://id.example"),
            [
                "https://id.example/.well-known/oauth-authorization-server",
                "https://id.example/.well-known/openid-configuration",
            ]
        );
        assert_eq!(
            metadata_urls("https://id.example/realms/main"),
            [
                "https://id.example/.well-known/oauth-authorization-server/realms/main",
                "https://id.example/realms/main/.well-known/openid-configuration",
            ]
        );
    }
}
