//! The requests legacy HTTP clients were sent and whose answers a call
//! waits for, by id; and the ids themselves, which name the replica that
//! holds the call when there are several.

use super::owner_of;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use ithaca_kit::principal::Principal;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Mutex;
use tokio::sync::oneshot;

/// Most requests waiting for an answer at once, edge-wide.
const MAX_WAITING: usize = 4096;

/// Bound to every sealed ask id, so nothing else sealed under the same
/// derived key opens as one.
const ASK_AAD: &[u8] = b"ithaca legacy ask id v1";

/// The purpose the ask id key is derived for from the internal key.
pub const ASK_KEY_PURPOSE: &str = "mcp-legacy-ask-id-v1";

/// Longest advertised URL an id may carry.
const MAX_URL: usize = 512;

/// Requests sent to legacy HTTP clients that wait for an answer, by id.
#[derive(Default)]
pub struct Asks {
    waiting: Mutex<HashMap<String, Waiting>>,
    /// This replica's internal URL and the cipher that seals it into ids;
    /// `None`: ids name no replica (one replica, or a sticky balancer).
    home: Option<Home>,
}

struct Home {
    url: String,
    cipher: ChaCha20Poly1305,
}

struct Waiting {
    owner: String,
    answer: oneshot::Sender<Value>,
}

impl Asks {
    /// Asks whose ids name this replica by `advertise_url` (its URL for the
    /// other replicas), sealed under `key` (derived from the internal key
    /// for [`ASK_KEY_PURPOSE`]); without a URL, ids name nothing.
    pub fn new(key: [u8; 32], advertise_url: Option<String>) -> Self {
        let home = advertise_url
            .map(|url| url.trim_end_matches('/').to_owned())
            .filter(|url| !url.is_empty() && url.len() <= MAX_URL)
            .map(|url| Home {
                url,
                cipher: ChaCha20Poly1305::new(Key::from_slice(&key)),
            });
        Asks {
            waiting: Mutex::default(),
            home,
        }
    }

    /// A fresh, unguessable id; it names this replica when it has a home.
    fn fresh_id(&self) -> String {
        let Some(home) = &self.home else {
            return format!("ithaca-{}", hex::encode(rand::random::<[u8; 16]>()));
        };
        // 96 random bits of nonce make each id unique and unguessable.
        let nonce: [u8; 12] = rand::random();
        let sealed = home
            .cipher
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: home.url.as_bytes(),
                    aad: ASK_AAD,
                },
            )
            .expect("encryption with a valid key and nonce does not fail");
        let mut raw = nonce.to_vec();
        raw.extend_from_slice(&sealed);
        format!("ithaca-{}", URL_SAFE_NO_PAD.encode(raw))
    }

    /// The internal URL of the replica that issued `id`, when another
    /// replica of this edge did: where an answer to it must go. `None` for
    /// an id this replica issued, one sealed under another key, or
    /// anything made up.
    pub fn elsewhere(&self, id: &str) -> Option<String> {
        let home = self.home.as_ref()?;
        let encoded = id.strip_prefix("ithaca-")?;
        if encoded.len() > 2 * MAX_URL {
            return None;
        }
        let raw = URL_SAFE_NO_PAD.decode(encoded).ok()?;
        if raw.len() <= 12 {
            return None;
        }
        let (nonce, sealed) = raw.split_at(12);
        let url = home
            .cipher
            .decrypt(
                Nonce::from_slice(nonce),
                Payload {
                    msg: sealed,
                    aad: ASK_AAD,
                },
            )
            .ok()?;
        let url = String::from_utf8(url).ok()?;
        (url != home.url).then_some(url)
    }

    /// A fresh id for a request `owner` will answer, and where the answer
    /// arrives. `None` when too many requests already wait.
    pub(crate) fn register(&self, owner: String) -> Option<(String, oneshot::Receiver<Value>)> {
        let id = self.fresh_id();
        let (answer, receiver) = oneshot::channel();
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        waiting.retain(|_, w| !w.answer.is_closed());
        if waiting.len() >= MAX_WAITING {
            return None;
        }
        waiting.insert(id.clone(), Waiting { owner, answer });
        Some((id, receiver))
    }

    pub(crate) fn forget(&self, id: &str) {
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        waiting.remove(id);
    }

    /// Hand a client's JSON-RPC response to the call waiting for it: true
    /// when one was, and `principal` is the caller it asked.
    pub fn answer(&self, principal: &Principal, response: Value) -> bool {
        let Some(id) = response.get("id").and_then(Value::as_str) else {
            return false;
        };
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        let mine = waiting
            .get(id)
            .is_some_and(|w| w.owner == owner_of(principal));
        if !mine {
            return false;
        }
        let Some(w) = waiting.remove(id) else {
            return false;
        };
        w.answer.send(response).is_ok()
    }
}
