//! The principal assertion every service verifies
//! (`ithaca_kit::principal::InternalKey::verify`): arbitrary assertions, and
//! arbitrary claims correctly signed with the key (so decoding past the
//! signature is reached), must never panic; a principal minted and verified
//! comes back unchanged.
//!
//! Input: a mode byte, then its data. 0: the assertion as given. 1: a claims
//! body, signed here. 2: fields of a principal (`\n`-separated tenant, key
//! id, session id and scopes) to mint and verify.

#![no_main]

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use ithaca_kit::principal::{InternalKey, Principal, VerifiedKey};
use libfuzzer_sys::fuzz_target;
use sha2::Sha256;

const SECRET: &[u8] = b"ithaca-fuzz-internal-key-of-at-least-32-bytes";

fn key() -> InternalKey {
    InternalKey::new(SECRET).expect("the fuzz key is long enough")
}

/// What `InternalKey::mint` produces for `body`: `v1.<body>.<tag>`, the tag
/// HMAC-SHA256 over `v1.<body>` (both base64url without padding).
fn sign(body: &[u8]) -> String {
    let signed = format!("v1.{}", URL_SAFE_NO_PAD.encode(body));
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(SECRET).expect("any key length");
    mac.update(signed.as_bytes());
    let tag = mac.finalize().into_bytes();
    format!("{signed}.{}", URL_SAFE_NO_PAD.encode(tag))
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let key = key();
    match mode % 3 {
        0 => {
            if let Ok(text) = std::str::from_utf8(rest) {
                let _ = key.verify(text);
            }
        }
        1 => {
            if let Ok(principal) = key.verify(&sign(rest)) {
                // Whatever a signed assertion said, it survives a round trip.
                let again = key
                    .verify(&key.mint(&principal, 60))
                    .expect("a minted assertion verifies");
                assert_eq!(again, principal);
            }
        }
        _ => {
            let text = String::from_utf8_lossy(rest);
            let mut fields = text.split('\n');
            let tenant_id = fields.next().unwrap_or("").to_owned();
            let key_id = fields.next().unwrap_or("").to_owned();
            let session = fields.next().map(str::to_owned);
            let scopes: Vec<String> = fields.map(str::to_owned).collect();
            let principal = Principal::verified(VerifiedKey {
                tenant_id,
                key_id,
                scopes,
                human: rest.len() % 2 == 0,
            })
            .in_session(session);
            let assertion = key.mint(&principal, 60);
            match key.verify(&assertion) {
                Ok(verified) => assert_eq!(verified, principal),
                // Verification refuses assertions over 8 KiB before decoding
                // anything; real principals (ids, a few scopes) are far
                // smaller, fuzzed ones need not be.
                Err(_) if assertion.len() > 8 * 1024 => return,
                Err(e) => panic!("{e:?}: {principal:?} as {assertion}"),
            }
            // One flipped character anywhere is refused.
            let mut bytes = assertion.into_bytes();
            let at = rest.len() % bytes.len();
            bytes[at] = if bytes[at] == b'A' { b'B' } else { b'A' };
            if let Ok(tampered) = String::from_utf8(bytes) {
                assert!(key.verify(&tampered).is_err(), "tampered at {at}: {tampered}");
            }
        }
    }
});
