//! Which redirect URIs a client may register: HTTPS, loopback HTTP on any
//! port (RFC 8252 §7.3), and private-use schemes such as `cursor://`
//! (RFC 8252 §7.1). Nothing that a browser would run or that could send a
//! code to an arbitrary web host over plain HTTP.

use url::Url;

/// Schemes a browser runs or reads locally: never a redirect target.
const REFUSED_SCHEMES: &[&str] = &[
    "javascript",
    "data",
    "vbscript",
    "file",
    "blob",
    "about",
    "filesystem",
    "ftp",
    "ws",
    "wss",
    "mailto",
];

/// Check one redirect URI; the error says what is wrong with it.
pub fn check(uri: &str) -> Result<(), String> {
    if uri.len() > 2000 || uri.chars().any(char::is_control) {
        return Err("redirect_uri: at most 2000 characters, no control characters".to_owned());
    }
    if uri.contains('#') {
        return Err("redirect_uri: must not contain a fragment".to_owned());
    }
    // The parser would read `https:///x` as host `x`; a URI with an empty
    // authority is refused as written.
    if uri
        .split_once("://")
        .is_some_and(|(_, rest)| rest.starts_with('/'))
    {
        return Err("redirect_uri: the authority (host) is empty".to_owned());
    }
    let url = Url::parse(uri).map_err(|e| format!("redirect_uri: not an absolute URI ({e})"))?;
    match url.scheme() {
        "https" => {
            if url.host_str().is_none_or(str::is_empty) {
                return Err("redirect_uri: an https URI needs a host".to_owned());
            }
            Ok(())
        }
        "http" => match url.host_str() {
            Some("127.0.0.1" | "[::1]" | "localhost") => Ok(()),
            _ => Err(
                "redirect_uri: plain http is allowed only to loopback (127.0.0.1, [::1], localhost)"
                    .to_owned(),
            ),
        },
        scheme if REFUSED_SCHEMES.contains(&scheme) => {
            Err(format!("redirect_uri: the {scheme}: scheme is not allowed"))
        }
        // A private-use scheme names an app on the device (`cursor://…`).
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::check;

    #[test]
    fn allows_https_loopback_and_private_use_schemes() {
        for ok in [
            "https://claude.ai/api/mcp/auth_callback",
            "http://127.0.0.1:33418/callback",
            "http://localhost:6274/oauth/callback",
            "http://[::1]:8000/cb",
            "cursor://anysphere.cursor-retrieval/oauth/callback",
            "com.example.app:/oauth2redirect",
        ] {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn refuses_open_redirect_shapes() {
        for bad in [
            "http://evil.example/callback",
            "http://127.0.0.1.evil.example/cb",
            "javascript:alert(1)",
            "JavaScript:alert(1)",
            "data:text/html,hi",
            "https://claude.ai/cb#frag",
            "https://claude.ai/cb#",
            "/relative/callback",
            "https:///nohost",
            "",
        ] {
            assert!(check(bad).is_err(), "{bad} must be refused");
        }
    }
}
