//! How the HTTP front behaves: the options `ithaca serve edge` sets.

use std::time::Duration;

/// How the HTTP edge behaves.
#[derive(Clone, Debug)]
pub struct HttpOptions {
    /// The public base URL (scheme://host[:port]); its host is accepted in
    /// `Host` and `Origin` besides loopback.
    pub public_url: String,
    /// Largest request body.
    pub body_limit: usize,
    /// Longest a request may take to produce its response head (a tool with
    /// a longer deadline of its own gets that plus a margin).
    pub request_timeout: Duration,
    /// Browser origins (`https://console.example`) allowed to call the edge
    /// cross-origin. Empty: CORS is off and preflights are refused.
    pub cors_origins: Vec<String>,
    /// Rate limits and quotas per key and per tenant (none by default).
    pub rate_limits: crate::limits::RateLimits,
    /// This replica's URL for the other edge replicas (`http://10.0.0.5:8080`),
    /// when there are several behind a balancer without affinity: a legacy
    /// client's answer to a request made during a call may reach another
    /// replica, which forwards it here (see `relay.rs`). `None`: answers
    /// are taken only where they land.
    pub advertise_url: Option<String>,
}

/// The defaults `ithaca up`, `ithaca serve edge` and tests share.
impl HttpOptions {
    pub const DEFAULT_PUBLIC_URL: &str = "http://127.0.0.1:8080";
    pub const DEFAULT_BODY_LIMIT: usize = 1024 * 1024;
    pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            public_url: Self::DEFAULT_PUBLIC_URL.to_owned(),
            body_limit: Self::DEFAULT_BODY_LIMIT,
            request_timeout: Self::DEFAULT_REQUEST_TIMEOUT,
            cors_origins: Vec::new(),
            rate_limits: crate::limits::RateLimits::default(),
            advertise_url: None,
        }
    }
}
