//! Secrets at rest (provider credentials and account configs, broker
//! credentials and altdata): ChaCha20-Poly1305 with a key derived from the
//! deployment's secret, a fresh random nonce per value. The plaintext
//! exists only while it is encrypted or used; nothing here logs it.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chacha20poly1305::aead::{Aead, KeyInit};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use sha2::{Digest, Sha256};

/// Encrypts and decrypts credentials.
#[derive(Clone)]
pub struct Vault {
    cipher: ChaCha20Poly1305,
}

impl std::fmt::Debug for Vault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Vault(..)")
    }
}

/// A stored credential could not be opened (wrong key or tampered).
#[derive(Debug, thiserror::Error)]
#[error("the stored credential cannot be decrypted")]
pub struct Sealed;

impl Vault {
    /// A vault whose key is derived from `secret` (the internal key, or a
    /// dedicated credentials key).
    pub fn new(secret: &[u8]) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(b"ithaca-broker-credentials-v1");
        hasher.update(secret);
        let key: [u8; 32] = hasher.finalize().into();
        Vault {
            cipher: ChaCha20Poly1305::new(Key::from_slice(&key)),
        }
    }

    /// base64(nonce ‖ ciphertext).
    pub fn seal(&self, plaintext: &str) -> String {
        let nonce_bytes: [u8; 12] = rand::random();
        let nonce = Nonce::from_slice(&nonce_bytes);
        let ciphertext = self
            .cipher
            .encrypt(nonce, plaintext.as_bytes())
            .expect("encryption with a valid key and nonce does not fail");
        let mut out = nonce_bytes.to_vec();
        out.extend_from_slice(&ciphertext);
        STANDARD.encode(out)
    }

    pub fn open(&self, sealed: &str) -> Result<String, Sealed> {
        let bytes = STANDARD.decode(sealed).map_err(|_| Sealed)?;
        if bytes.len() < 12 {
            return Err(Sealed);
        }
        let (nonce, ciphertext) = bytes.split_at(12);
        let plain = self
            .cipher
            .decrypt(Nonce::from_slice(nonce), ciphertext)
            .map_err(|_| Sealed)?;
        String::from_utf8(plain).map_err(|_| Sealed)
    }
}

#[cfg(test)]
mod tests {
    use super::Vault;

    #[test]
    fn round_trips_and_refuses_other_keys_and_tampering() {
        let vault = Vault::new(b"one key that is long enough for us");
        let sealed = vault.seal("s3cret-token");
        assert!(!sealed.contains("s3cret"));
        assert_ne!(
            sealed,
            vault.seal("s3cret-token"),
            "a fresh nonce each time"
        );
        assert_eq!(vault.open(&sealed).expect("opens"), "s3cret-token");
        assert!(
            Vault::new(b"another key entirely, also long")
                .open(&sealed)
                .is_err()
        );
        let mut tampered = sealed.into_bytes();
        let last = tampered.len() - 3;
        tampered[last] = if tampered[last] == b'A' { b'B' } else { b'A' };
        assert!(
            vault
                .open(&String::from_utf8(tampered).expect("ascii"))
                .is_err()
        );
    }
}
