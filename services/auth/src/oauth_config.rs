//! OAuth's settings and token prefixes: what the key service (which tells
//! an access token from a key) and the OAuth service both read.

/// The prefix of every access token.
pub const ACCESS_PREFIX: &str = "ithaca_at_";
/// The prefix of every refresh token.
pub const REFRESH_PREFIX: &str = "ithaca_rt_";

/// Lifetimes; tests shorten them.
#[derive(Clone, Copy, Debug)]
pub struct OAuthConfig {
    pub code_ttl_ms: i64,
    pub access_ttl_ms: i64,
    pub refresh_ttl_ms: i64,
    /// How long a registration nobody consented to is kept.
    pub registration_ttl_ms: i64,
}

impl Default for OAuthConfig {
    fn default() -> Self {
        OAuthConfig {
            code_ttl_ms: 60_000,
            access_ttl_ms: 600_000,
            refresh_ttl_ms: 30 * 24 * 3600 * 1000,
            registration_ttl_ms: 24 * 3600 * 1000,
        }
    }
}
