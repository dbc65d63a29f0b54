//! The console's sign-in cookie and its CSRF tokens.
//!
//! A person signs in with a human key. The browser gets back one cookie,
//! `ithaca_console`: base64url(nonce ‖ ChaCha20-Poly1305(claims)), with a key
//! derived from the deployment's internal key. The AEAD both hides the claims
//! (the key never reaches the browser in readable form, nor its logs) and
//! signs them: a changed byte fails to open. The claims are the key's token,
//! the id of the sign-in the auth service recorded, an expiry and a random
//! CSRF nonce.
//!
//! Why the token and a sign-in id: every console request verifies both
//! through the auth service (`VerifySignIn`, see [`crate::signins`]), so
//! signing out or revoking the key ends the console session at once on
//! every replica, while the console itself owns no state.
//!
//! CSRF: every state-changing form carries `HMAC(csrf key, nonce)`, the
//! synchronizer token of this sign-in; the cookie is `SameSite=Strict` and
//! POSTs from another origin are refused before the token is even read.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use hmac::{Hmac, Mac};
use ithaca_kit::principal::InternalKey;
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// The cookie's name.
pub const NAME: &str = "ithaca_console";

/// Bound to every sealed cookie, so nothing else sealed with a key derived
/// the same way could pass for one.
const AAD: &[u8] = b"ithaca-console-cookie-v1";

/// Longer cookie values are refused before any work is done.
const MAX_LEN: usize = 4096;

/// What a sealed cookie holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// The human key's full token, re-verified on every request.
    pub token: String,
    /// The auth service's record of this sign-in (`OpenSignIn`); the cookie
    /// works only while it is open. Empty in cookies sealed before sign-ins
    /// were recorded, which are refused.
    #[serde(default)]
    pub sign_in: String,
    /// Unix seconds after which the cookie is refused.
    pub exp: i64,
    /// Random per sign-in; the CSRF token is derived from it.
    pub nonce: String,
}

/// Seals and opens console cookies; derives CSRF tokens.
#[derive(Clone)]
pub struct Sealer {
    cipher: ChaCha20Poly1305,
    csrf_key: [u8; 32],
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sealer(..)")
    }
}

impl Sealer {
    /// Keys derived from the internal key, one per purpose.
    pub fn new(key: &InternalKey) -> Self {
        let seal_key = key.derive("console-cookie-v1");
        Sealer {
            cipher: ChaCha20Poly1305::new(Key::from_slice(&seal_key)),
            csrf_key: key.derive("console-csrf-v1"),
        }
    }

    /// Fresh claims for `token` and its sign-in, valid `ttl_secs` from
    /// `now_secs`.
    pub fn claims(token: &str, sign_in: &str, now_secs: i64, ttl_secs: i64) -> Claims {
        Claims {
            token: token.to_owned(),
            sign_in: sign_in.to_owned(),
            exp: now_secs + ttl_secs,
            nonce: hex::encode(rand::random::<[u8; 16]>()),
        }
    }

    /// The cookie value of `claims`.
    pub fn seal(&self, claims: &Claims) -> String {
        let nonce: [u8; 12] = rand::random();
        let plain = serde_json::to_vec(claims).expect("claims serialize to JSON");
        let sealed = self
            .cipher
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: &plain,
                    aad: AAD,
                },
            )
            .expect("encryption with a valid key and nonce does not fail");
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        URL_SAFE_NO_PAD.encode(out)
    }

    /// The claims of a cookie value, if it is ours, intact and not expired.
    pub fn open(&self, value: &str, now_secs: i64) -> Option<Claims> {
        if value.len() > MAX_LEN {
            return None;
        }
        let bytes = URL_SAFE_NO_PAD.decode(value).ok()?;
        if bytes.len() < 12 {
            return None;
        }
        let (nonce, sealed) = bytes.split_at(12);
        let plain = self
            .cipher
            .decrypt(
                Nonce::from_slice(nonce),
                Payload {
                    msg: sealed,
                    aad: AAD,
                },
            )
            .ok()?;
        let claims: Claims = serde_json::from_slice(&plain).ok()?;
        (claims.exp > now_secs).then_some(claims)
    }

    /// The CSRF token of a sign-in.
    pub fn csrf(&self, claims: &Claims) -> String {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.csrf_key)
            .expect("hmac takes any key length");
        mac.update(claims.nonce.as_bytes());
        URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
    }

    /// Whether `sent` is the CSRF token of `claims` (constant time).
    pub fn csrf_ok(&self, claims: &Claims, sent: &str) -> bool {
        let expected = self.csrf(claims);
        expected.as_bytes().ct_eq(sent.as_bytes()).into()
    }
}

/// The value of cookie `name` in a `Cookie` header.
pub fn find<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    header
        .split(';')
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sealer(byte: u8) -> Sealer {
        Sealer::new(&InternalKey::new(vec![byte; 32]).expect("32 bytes"))
    }

    #[test]
    fn round_trips_and_hides_the_token() {
        let s = sealer(1);
        let claims = Sealer::claims("dmbg_test_abc_s3cret", "0123", 100, 60);
        let value = s.seal(&claims);
        assert!(!value.contains("s3cret"));
        assert_eq!(s.open(&value, 120), Some(claims));
    }

    #[test]
    fn refuses_expired_tampered_and_foreign_cookies() {
        let s = sealer(1);
        let value = s.seal(&Sealer::claims("tok", "0123", 100, 60));
        assert_eq!(s.open(&value, 160), None, "expired");
        assert_eq!(sealer(2).open(&value, 120), None, "another deployment");
        let mut bytes = URL_SAFE_NO_PAD.decode(&value).expect("b64");
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        assert_eq!(s.open(&URL_SAFE_NO_PAD.encode(bytes), 120), None);
        for junk in ["", "x", "!!!", &"a".repeat(5000)] {
            assert_eq!(s.open(junk, 120), None);
        }
    }

    #[test]
    fn csrf_tokens_belong_to_one_sign_in() {
        let s = sealer(1);
        let a = Sealer::claims("tok", "0123", 100, 60);
        let b = Sealer::claims("tok", "0123", 100, 60);
        assert!(s.csrf_ok(&a, &s.csrf(&a)));
        assert!(!s.csrf_ok(&b, &s.csrf(&a)));
        assert!(!s.csrf_ok(&a, ""));
        assert!(!sealer(2).csrf_ok(&a, &s.csrf(&a)));
    }

    #[test]
    fn finds_cookies() {
        assert_eq!(find("a=1; ithaca_console=xyz; b=2", NAME), Some("xyz"));
        assert_eq!(find("a=1", NAME), None);
    }
}
