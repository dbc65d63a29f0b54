//! The JOSE part of an external access token: a compact JWS (RFC 7515)
//! whose signature is checked against one of the issuer's JSON Web Keys
//! (RFC 7517), and whose claims are checked as RFC 9068 asks.
//!
//! Deliberately small: only asymmetric algorithms are known at all, so
//! `none` and every HMAC (`HS256` keyed with a public key is the classic
//! confusion) are refused by the same test that refuses a misspelling. A key
//! is used only for the algorithm family its `kty` says, and only when its
//! own `alg` (if it names one) is the token's. Header fields that point
//! elsewhere for keys (`jku`, `x5u`, `jwk`) are never followed: keys come
//! from the configured issuer's JWKS and nowhere else.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Deserialize;
use serde_json::Value;

/// The signature algorithms accepted (all asymmetric).
pub const ALGORITHMS: &[&str] = &[
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256",
];

/// The smallest RSA modulus accepted, in bits (NIST SP 800-131A).
const MIN_RSA_BITS: usize = 2048;

/// Longer tokens are refused before any decoding work is done.
pub const MAX_TOKEN_LEN: usize = 16 * 1024;

/// Why a token was refused. Callers see one `invalid_token`; the variant is
/// for logs and tests, and never carries the token.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum JwtError {
    #[error("not a compact JWS")]
    Malformed,
    #[error("signature algorithm {0:?} is not accepted")]
    Algorithm(String),
    #[error("the header has critical extensions this server does not understand")]
    Critical,
    #[error("no key of the issuer matches the token's kid and algorithm")]
    NoKey,
    #[error("signature invalid")]
    Signature,
    #[error("claim {0} is missing or malformed")]
    Claim(&'static str),
    #[error("issuer does not match")]
    Issuer,
    #[error("the token is not for this resource (aud)")]
    Audience,
    #[error("the token expired")]
    Expired,
    #[error("the token is not valid yet (nbf)")]
    NotYetValid,
}

/// A token split and its header read, before its signature is checked.
#[derive(Debug)]
pub struct Parsed<'a> {
    pub alg: String,
    pub kid: Option<String>,
    /// `header.payload`, the bytes the signature covers.
    signing_input: &'a str,
    payload: Vec<u8>,
    signature: Vec<u8>,
}

#[derive(Deserialize)]
struct Header {
    alg: Option<String>,
    kid: Option<String>,
    crit: Option<Value>,
}

/// Whether `token` has the shape of a compact JWS (three base64url parts),
/// as opposed to a `dmbg_` key or an opaque token: cheap, no decoding.
pub fn looks_like_jwt(token: &str) -> bool {
    let mut parts = token.split('.');
    let shaped = (0..3).all(|_| {
        parts.next().is_some_and(|p| {
            p.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
    });
    shaped && parts.next().is_none() && token.starts_with("eyJ")
}

/// Split `token` and read its header; the algorithm is checked here, before
/// any key is looked up.
pub fn parse(token: &str) -> Result<Parsed<'_>, JwtError> {
    if token.len() > MAX_TOKEN_LEN {
        return Err(JwtError::Malformed);
    }
    let (signing_input, signature) = token.rsplit_once('.').ok_or(JwtError::Malformed)?;
    let (header, payload) = signing_input.split_once('.').ok_or(JwtError::Malformed)?;
    let decode = |part: &str| {
        URL_SAFE_NO_PAD
            .decode(part)
            .map_err(|_| JwtError::Malformed)
    };
    let header: Header =
        serde_json::from_slice(&decode(header)?).map_err(|_| JwtError::Malformed)?;
    let alg = header.alg.ok_or(JwtError::Malformed)?;
    if !ALGORITHMS.contains(&alg.as_str()) {
        return Err(JwtError::Algorithm(alg));
    }
    if header.crit.is_some() {
        return Err(JwtError::Critical);
    }
    Ok(Parsed {
        alg,
        kid: header.kid,
        signing_input,
        payload: decode(payload)?,
        signature: decode(signature)?,
    })
}

/// One public key of an issuer's JWKS, as published.
#[derive(Clone, Debug, Deserialize)]
pub struct Jwk {
    pub kty: String,
    #[serde(default)]
    pub kid: Option<String>,
    #[serde(default)]
    pub alg: Option<String>,
    #[serde(default, rename = "use")]
    pub use_: Option<String>,
    #[serde(default)]
    pub n: Option<String>,
    #[serde(default)]
    pub e: Option<String>,
    #[serde(default)]
    pub crv: Option<String>,
    #[serde(default)]
    pub x: Option<String>,
    #[serde(default)]
    pub y: Option<String>,
}

impl Jwk {
    /// Whether this key may check a signature of `alg` under `kid`: a
    /// signing key of the algorithm's family, not bound to another
    /// algorithm, with the token's kid when the token names one.
    pub fn fits(&self, alg: &str, kid: Option<&str>) -> bool {
        let family = match alg {
            "ES256" => self.kty == "EC" && self.crv.as_deref() == Some("P-256"),
            _ => self.kty == "RSA",
        };
        family
            && self.alg.as_deref().is_none_or(|a| a == alg)
            && self.use_.as_deref().is_none_or(|u| u == "sig")
            && kid.is_none_or(|k| self.kid.as_deref() == Some(k))
    }
}

impl Parsed<'_> {
    /// Check the signature with `key` (which [`Jwk::fits`] the token).
    pub fn verify(&self, key: &Jwk) -> Result<(), JwtError> {
        let message = self.signing_input.as_bytes();
        match self.alg.as_str() {
            "ES256" => verify_es256(key, message, &self.signature),
            alg => verify_rsa(alg, key, message, &self.signature),
        }
    }

    /// The claims, once the signature verified.
    pub fn claims(&self) -> Result<serde_json::Map<String, Value>, JwtError> {
        match serde_json::from_slice(&self.payload) {
            Ok(Value::Object(map)) => Ok(map),
            _ => Err(JwtError::Malformed),
        }
    }
}

fn b64(field: &Option<String>) -> Result<Vec<u8>, JwtError> {
    let text = field.as_deref().ok_or(JwtError::NoKey)?;
    URL_SAFE_NO_PAD.decode(text).map_err(|_| JwtError::NoKey)
}

fn verify_es256(key: &Jwk, message: &[u8], signature: &[u8]) -> Result<(), JwtError> {
    use p256::ecdsa::signature::Verifier;
    let (x, y) = (b64(&key.x)?, b64(&key.y)?);
    if x.len() != 32 || y.len() != 32 {
        return Err(JwtError::NoKey);
    }
    let mut sec1 = Vec::with_capacity(65);
    sec1.push(0x04);
    sec1.extend_from_slice(&x);
    sec1.extend_from_slice(&y);
    let verifying =
        p256::ecdsa::VerifyingKey::from_sec1_bytes(&sec1).map_err(|_| JwtError::NoKey)?;
    // JWS carries r || s (RFC 7518 §3.4), not DER.
    let signature =
        p256::ecdsa::Signature::from_slice(signature).map_err(|_| JwtError::Signature)?;
    verifying
        .verify(message, &signature)
        .map_err(|_| JwtError::Signature)
}

fn verify_rsa(alg: &str, key: &Jwk, message: &[u8], signature: &[u8]) -> Result<(), JwtError> {
    use rsa::signature::Verifier;
    use rsa::traits::PublicKeyParts;
    use rsa::{BigUint, RsaPublicKey, pkcs1v15, pss};
    use sha2::{Sha256, Sha384, Sha512};
    let n = BigUint::from_bytes_be(&b64(&key.n)?);
    let e = BigUint::from_bytes_be(&b64(&key.e)?);
    let public = RsaPublicKey::new(n, e).map_err(|_| JwtError::NoKey)?;
    if public.size() * 8 < MIN_RSA_BITS {
        return Err(JwtError::NoKey);
    }
    let bad = |_| JwtError::Signature;
    let pkcs1 = pkcs1v15::Signature::try_from(signature).map_err(bad)?;
    let pss_sig = pss::Signature::try_from(signature).map_err(bad)?;
    let checked = match alg {
        "RS256" => pkcs1v15::VerifyingKey::<Sha256>::new(public).verify(message, &pkcs1),
        "RS384" => pkcs1v15::VerifyingKey::<Sha384>::new(public).verify(message, &pkcs1),
        "RS512" => pkcs1v15::VerifyingKey::<Sha512>::new(public).verify(message, &pkcs1),
        "PS256" => pss::VerifyingKey::<Sha256>::new(public).verify(message, &pss_sig),
        "PS384" => pss::VerifyingKey::<Sha384>::new(public).verify(message, &pss_sig),
        "PS512" => pss::VerifyingKey::<Sha512>::new(public).verify(message, &pss_sig),
        other => return Err(JwtError::Algorithm(other.to_owned())),
    };
    checked.map_err(|_| JwtError::Signature)
}

/// What the time claims are checked against.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    /// Now, in Unix seconds.
    pub now: i64,
    /// Clock skew tolerated each way, in seconds.
    pub leeway: i64,
}

/// Check `iss`, `aud`, `exp` and `nbf` of verified `claims`: the token was
/// issued by `issuer`, for `resource`, and is valid at `clock`.
pub fn check_claims(
    claims: &serde_json::Map<String, Value>,
    issuer: &str,
    resource: &str,
    clock: Clock,
) -> Result<(), JwtError> {
    if claims.get("iss").and_then(Value::as_str) != Some(issuer) {
        return Err(JwtError::Issuer);
    }
    let for_us = match claims.get("aud") {
        Some(Value::String(aud)) => aud == resource,
        Some(Value::Array(auds)) => auds.iter().any(|a| a.as_str() == Some(resource)),
        _ => false,
    };
    if !for_us {
        return Err(JwtError::Audience);
    }
    // An access token without an expiry would be valid forever: refused.
    let exp = number(claims, "exp")?.ok_or(JwtError::Claim("exp"))?;
    if clock.now >= exp.saturating_add(clock.leeway) {
        return Err(JwtError::Expired);
    }
    if let Some(nbf) = number(claims, "nbf")?
        && clock.now.saturating_add(clock.leeway) < nbf
    {
        return Err(JwtError::NotYetValid);
    }
    Ok(())
}

/// A NumericDate claim, in whole seconds (a fraction is cut).
fn number(
    claims: &serde_json::Map<String, Value>,
    name: &'static str,
) -> Result<Option<i64>, JwtError> {
    match claims.get(name) {
        None => Ok(None),
        Some(v) => v
            .as_i64()
            .or_else(|| v.as_f64().filter(|f| f.is_finite()).map(|f| f as i64))
            .map(Some)
            .ok_or(JwtError::Claim(name)),
    }
}
