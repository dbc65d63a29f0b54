//! The sealed `requestState` a 2026-07-28 client carries between input
//! rounds: the edge keeps nothing between them.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use ithaca_kit::principal::{InternalKey, Principal};
use serde::{Deserialize, Serialize};

/// How long a sealed `requestState` may be brought back.
const STATE_TTL_SECS: i64 = 3600;

/// Bound to every sealed state, so nothing else sealed under a key derived
/// the same way passes for one.
const STATE_AAD: &[u8] = b"ithaca-mcp-request-state-v1";

/// What a sealed state holds: the service's state, bound to the caller and
/// the tool (or prompt) it was issued for, with an expiry.
#[derive(Serialize, Deserialize)]
struct Sealed {
    /// `tool:NAME` or `prompt:NAME`.
    target: String,
    tenant: String,
    key: String,
    agent: String,
    exp: i64,
    /// The service's state, base64url.
    state: String,
}

/// Seals and opens `requestState`: ChaCha20-Poly1305 under a key derived
/// from the internal key, so a client can neither read a service's state
/// nor change it, and a state issued to one caller or tool opens for no
/// other.
#[derive(Clone)]
pub struct StateSealer {
    cipher: ChaCha20Poly1305,
}

impl std::fmt::Debug for StateSealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StateSealer(..)")
    }
}

/// Why a `requestState` was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    #[error("requestState failed its integrity check: it is not one this server issued")]
    Tampered,
    #[error("requestState was issued for another caller or another request")]
    Foreign,
    #[error("requestState has expired")]
    Expired,
}

impl StateSealer {
    pub fn new(key: &InternalKey) -> Self {
        let key = key.derive("mcp-request-state-v1");
        StateSealer {
            cipher: ChaCha20Poly1305::new(Key::from_slice(&key)),
        }
    }

    /// The `requestState` of `state`, for `caller` calling `target`.
    pub fn seal(&self, caller: &Principal, target: &str, state: &[u8], now_secs: i64) -> String {
        let sealed = Sealed {
            target: target.to_owned(),
            tenant: caller.tenant_id().to_owned(),
            key: caller.key_id().to_owned(),
            agent: caller.agent().to_owned(),
            exp: now_secs + STATE_TTL_SECS,
            state: URL_SAFE_NO_PAD.encode(state),
        };
        let plain = serde_json::to_vec(&sealed).expect("sealed state serializes to JSON");
        let nonce: [u8; 12] = rand::random();
        let cipher = self
            .cipher
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: &plain,
                    aad: STATE_AAD,
                },
            )
            .expect("encryption with a valid key and nonce does not fail");
        let mut out = nonce.to_vec();
        out.extend_from_slice(&cipher);
        URL_SAFE_NO_PAD.encode(out)
    }

    /// The service's state inside `value`, if this server sealed it for
    /// `caller` and `target` and it has not expired.
    pub fn open(
        &self,
        caller: &Principal,
        target: &str,
        value: &str,
        now_secs: i64,
    ) -> Result<Vec<u8>, StateError> {
        let bytes = URL_SAFE_NO_PAD
            .decode(value)
            .map_err(|_| StateError::Tampered)?;
        if bytes.len() < 12 {
            return Err(StateError::Tampered);
        }
        let (nonce, cipher) = bytes.split_at(12);
        let plain = self
            .cipher
            .decrypt(
                Nonce::from_slice(nonce),
                Payload {
                    msg: cipher,
                    aad: STATE_AAD,
                },
            )
            .map_err(|_| StateError::Tampered)?;
        let sealed: Sealed = serde_json::from_slice(&plain).map_err(|_| StateError::Tampered)?;
        if sealed.target != target
            || sealed.tenant != caller.tenant_id()
            || sealed.key != caller.key_id()
            || sealed.agent != caller.agent()
        {
            return Err(StateError::Foreign);
        }
        if sealed.exp < now_secs {
            return Err(StateError::Expired);
        }
        URL_SAFE_NO_PAD
            .decode(sealed.state)
            .map_err(|_| StateError::Tampered)
    }
}

/// Seconds since the Unix epoch.
pub fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(key: &str) -> Principal {
        Principal::local_agent("t1", key, ["data:read"])
    }

    #[test]
    fn sealed_state_opens_only_untouched_for_its_caller_and_target() {
        let key = InternalKey::new("a-test-internal-key-of-enough-length-0123").expect("key");
        let sealer = StateSealer::new(&key);
        let alice = caller("alice");
        let sealed = sealer.seal(&alice, "tool:t", b"step=2", 1_000);
        assert_eq!(
            sealer.open(&alice, "tool:t", &sealed, 1_001),
            Ok(b"step=2".to_vec())
        );
        let mut tampered = sealed.clone();
        tampered.push_str("-TAMPERED");
        assert_eq!(
            sealer.open(&alice, "tool:t", &tampered, 1_001),
            Err(StateError::Tampered)
        );
        let mut flipped = URL_SAFE_NO_PAD.decode(&sealed).expect("base64");
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert_eq!(
            sealer.open(&alice, "tool:t", &URL_SAFE_NO_PAD.encode(flipped), 1_001),
            Err(StateError::Tampered)
        );
        assert_eq!(
            sealer.open(&caller("bob"), "tool:t", &sealed, 1_001),
            Err(StateError::Foreign)
        );
        assert_eq!(
            sealer.open(&alice, "tool:other", &sealed, 1_001),
            Err(StateError::Foreign)
        );
        assert_eq!(
            sealer.open(&alice, "tool:t", &sealed, 1_000 + STATE_TTL_SECS + 1),
            Err(StateError::Expired)
        );
        let other = StateSealer::new(
            &InternalKey::new("another-test-internal-key-of-enough-length").expect("key"),
        );
        assert_eq!(
            other.open(&alice, "tool:t", &sealed, 1_001),
            Err(StateError::Tampered)
        );
    }
}
