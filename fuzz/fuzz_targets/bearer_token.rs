//! Bearer tokens: the `Authorization` header as the edge reads it
//! (`ithaca_edge::auth::bearer_token`), then the token as the auth service
//! splits it (`ithaca_auth::model::parse_token`, seed 000's
//! `dmbg_<env>_<keyid>_<secret>`). Neither may panic; what they accept must
//! be a part of what they were given, and a parsed token must reassemble
//! into itself.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(header) = std::str::from_utf8(data) else {
        return;
    };
    if let Some(token) = ithaca_edge::auth::bearer_token(header) {
        assert!(!token.is_empty());
        assert!(header.contains(token));
        assert_eq!(token, token.trim());
    }
    // The auth service sees whatever token the edge passes on, so it is
    // fuzzed on the raw input too.
    for token in [Some(header), ithaca_edge::auth::bearer_token(header)]
        .into_iter()
        .flatten()
    {
        if let Some(parts) = ithaca_auth::model::parse_token(token) {
            assert_eq!(
                format!("dmbg_{}_{}_{}", parts.env, parts.key_id, parts.secret),
                token
            );
            assert!(ithaca_auth::model::is_key_id(parts.key_id));
            assert!(parts.secret.len() >= 32);
        }
    }
});
