//! Domain types with their parsing rules: scopes, actors, key ids, and the
//! bearer token format `dmbg_<env>_<keyid>_<secret>` of seed 000. Tenant ids
//! are the kit's [`ithaca_kit::id::TenantId`].

use std::fmt;

/// The fixed token prefix, so leaked keys can be found by scanners.
pub const TOKEN_PREFIX: &str = "dmbg";

/// Deployment tags a token may carry.
pub const KNOWN_ENVS: &[&str] = &["test", "dev", "staging", "prod"];

/// Tokens longer than this are refused before any other work.
pub const MAX_TOKEN_LEN: usize = 256;

/// A scope a key may be granted (seed 000's table).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    DataRead,
    StrategyAuthor,
    RunsWrite,
    RunsCancel,
    ApprovalsRead,
    ApprovalsDecide,
    ArtifactsRead,
    FiltersWrite,
    CommentsWrite,
}

impl Scope {
    pub const ALL: [Scope; 9] = [
        Scope::DataRead,
        Scope::StrategyAuthor,
        Scope::RunsWrite,
        Scope::RunsCancel,
        Scope::ApprovalsRead,
        Scope::ApprovalsDecide,
        Scope::ArtifactsRead,
        Scope::FiltersWrite,
        Scope::CommentsWrite,
    ];

    pub fn as_str(self) -> &'static str {
        use ithaca_proto::scopes;
        match self {
            Scope::DataRead => scopes::DATA_READ,
            Scope::StrategyAuthor => scopes::STRATEGY_AUTHOR,
            Scope::RunsWrite => scopes::RUNS_WRITE,
            Scope::RunsCancel => scopes::RUNS_CANCEL,
            Scope::ApprovalsRead => scopes::APPROVALS_READ,
            Scope::ApprovalsDecide => scopes::APPROVALS_DECIDE,
            Scope::ArtifactsRead => scopes::ARTIFACTS_READ,
            Scope::FiltersWrite => scopes::FILTERS_WRITE,
            Scope::CommentsWrite => scopes::COMMENTS_WRITE,
        }
    }

    /// Parse a scope name; the error names the valid ones.
    pub fn parse(s: &str) -> Result<Scope, String> {
        Scope::ALL
            .into_iter()
            .find(|scope| scope.as_str() == s)
            .ok_or_else(|| {
                let valid: Vec<_> = Scope::ALL.iter().map(|s| s.as_str()).collect();
                format!("unknown scope {s:?}; valid scopes: {}", valid.join(", "))
            })
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

ithaca_kit::text_enum! {
    /// Who uses a key.
    pub enum KeyActor {
        Human = "human",
        Agent = "agent",
    }
}

ithaca_kit::string_id! {
    /// An API key's id: a UUID4 rendered as 32 lowercase hex digits, the
    /// third part of a token.
    pub struct KeyId;
    check = |s| is_key_id(s).then(|| s.to_owned());
    error = "key_id: must be 32 lowercase hex digits";
}

ithaca_kit::string_id! {
    /// A console sign-in's id: 128 random bits as 32 lowercase hex digits.
    pub struct SignInId;
    check = |s| is_key_id(s).then(|| s.to_owned());
    error = "sign_in_id: must be 32 lowercase hex digits";
}

/// The shortest and longest sign-in a console may open, in seconds.
pub const MIN_SIGN_IN_SECS: i64 = 60;
pub const MAX_SIGN_IN_SECS: i64 = 24 * 3600;

/// A token split into its parts. Borrowed from the presented string; the
/// secret is never copied into long-lived memory.
#[derive(Debug, PartialEq, Eq)]
pub struct TokenParts<'a> {
    pub env: &'a str,
    pub key_id: &'a str,
    pub secret: &'a str,
}

/// Split a bearer token on its first three `_` (the secret may contain `_`)
/// and check each part's shape. `None` for anything malformed; callers must
/// not tell the presenter which part was wrong.
pub fn parse_token(token: &str) -> Option<TokenParts<'_>> {
    if token.len() > MAX_TOKEN_LEN || !token.is_ascii() {
        return None;
    }
    let mut parts = token.splitn(4, '_');
    let (prefix, env, key_id, secret) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let well_formed = prefix == TOKEN_PREFIX
        && KNOWN_ENVS.contains(&env)
        && is_key_id(key_id)
        && secret.len() >= 32
        && secret
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    well_formed.then_some(TokenParts {
        env,
        key_id,
        secret,
    })
}

/// A key id is a UUID4 rendered as 32 lowercase hex digits.
pub fn is_key_id(s: &str) -> bool {
    s.len() == 32
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Check an env tag for new keys.
pub fn parse_env(env: &str) -> Result<&str, String> {
    if KNOWN_ENVS.contains(&env) {
        Ok(env)
    } else {
        Err(format!(
            "unknown env {env:?}; valid envs: {}",
            KNOWN_ENVS.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY_ID: &str = "0123456789abcdef0123456789abcdef";
    const SECRET: &str = "abcdefghijklmnopqrstuvwxyz_ABCDEFGH-0123456";

    #[test]
    fn splits_on_the_first_three_separators_only() {
        let token = format!("dmbg_test_{KEY_ID}_{SECRET}");
        assert_eq!(
            parse_token(&token),
            Some(TokenParts {
                env: "test",
                key_id: KEY_ID,
                secret: SECRET
            })
        );
    }

    #[test]
    fn refuses_malformed_tokens() {
        let cases = [
            String::new(),
            format!("dmbx_test_{KEY_ID}_{SECRET}"),
            format!("dmbg_moon_{KEY_ID}_{SECRET}"),
            format!("dmbg_test_{KEY_ID}"),
            "dmbg_test".to_owned(),
            format!("dmbg_test_{}_{SECRET}", &KEY_ID[..31]),
            format!("dmbg_test_{}_{SECRET}", KEY_ID.to_uppercase()),
            format!("dmbg_test_{KEY_ID}_short"),
            format!("dmbg_test_{KEY_ID}_{SECRET}é"),
            format!("dmbg_test_{KEY_ID}_{}", "a".repeat(10_000)),
            format!("dmbg_test_{KEY_ID}_{SECRET} "),
        ];
        for case in &cases {
            assert_eq!(parse_token(case), None, "{case:?} must be refused");
        }
    }

    #[test]
    fn scopes_are_the_contracts_list() {
        let ours: Vec<&str> = Scope::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(ours, ithaca_proto::scopes::ALL);
    }

    #[test]
    fn scopes_parse_and_name_the_valid_set() {
        for scope in Scope::ALL {
            assert_eq!(Scope::parse(scope.as_str()), Ok(scope));
        }
        let err = Scope::parse("root").expect_err("root is no scope");
        assert!(err.contains("data:read"), "{err}");
    }
}
