//! Masking secrets in what `ithaca connect` prints.
//!
//! The diff shows lines of the user's file, so besides the key we were
//! given it may show anyone's credentials: another server's token in
//! context lines, an old key of ours on a `-` line. Each line is masked
//! before it is printed: the strings we know are secret, every `dmbg_`
//! key, whatever follows `Bearer `, the password in a URL, and the string
//! value of any field whose name says it holds a secret.

/// Field names that hold a secret, lowercased substrings.
const SECRET_NAMES: [&str; 10] = [
    "token",
    "secret",
    "password",
    "passwd",
    "authorization",
    "api_key",
    "apikey",
    "api-key",
    "credential",
    "cookie",
];

/// Masks the secrets in lines of text.
pub struct Masker {
    /// Known secrets, longest first, as written raw and inside a JSON or
    /// TOML string.
    literals: Vec<String>,
}

/// A secret as `dmbg_…wxyz` (or `…wxyz`): the last four characters of a
/// long one, to tell keys apart; nothing of a short one.
pub fn mask(secret: &str) -> String {
    if let Some(rest) = secret.strip_prefix("Bearer ") {
        return format!("Bearer {}", mask(rest));
    }
    let chars: Vec<char> = secret.chars().collect();
    let tail: String = if chars.len() >= 16 {
        chars[chars.len() - 4..].iter().collect()
    } else {
        String::new()
    };
    if secret.starts_with("dmbg_") {
        format!("dmbg_…{tail}")
    } else {
        format!("…{tail}")
    }
}

impl Masker {
    pub fn new(secrets: impl IntoIterator<Item = String>) -> Masker {
        let mut literals: Vec<String> = Vec::new();
        for secret in secrets.into_iter().filter(|s| !s.is_empty()) {
            let quoted = super::json::quote(&secret);
            let escaped = quoted[1..quoted.len() - 1].to_owned();
            literals.push(secret);
            literals.push(escaped);
        }
        literals.sort_by_key(|s| std::cmp::Reverse(s.len()));
        literals.dedup();
        Masker { literals }
    }

    /// `text` with every line masked.
    pub fn text(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        for piece in text.split_inclusive('\n') {
            let (line, end) = match piece.strip_suffix('\n') {
                Some(line) => (line, "\n"),
                None => (piece, ""),
            };
            out.push_str(&self.line(line));
            out.push_str(end);
        }
        out
    }

    /// One line, masked.
    pub fn line(&self, line: &str) -> String {
        let mut ranges: Vec<(usize, usize)> = Vec::new();
        for literal in &self.literals {
            ranges.extend(
                line.match_indices(literal.as_str())
                    .map(|(i, m)| (i, i + m.len())),
            );
        }
        ranges.extend(token_ranges(line, "dmbg_", 0));
        ranges.extend(token_ranges(line, "Bearer ", "Bearer ".len()));
        ranges.extend(url_passwords(line));
        ranges.extend(secret_values(line));
        if ranges.is_empty() {
            return line.to_owned();
        }
        ranges.sort();
        let mut merged: Vec<(usize, usize)> = Vec::new();
        for (start, end) in ranges {
            match merged.last_mut() {
                Some(last) if start <= last.1 => last.1 = last.1.max(end),
                _ => merged.push((start, end)),
            }
        }
        let mut out = String::with_capacity(line.len());
        let mut at = 0;
        for (start, end) in merged {
            out.push_str(&line[at..start]);
            out.push_str(&mask(&line[start..end]));
            at = end;
        }
        out.push_str(&line[at..]);
        out
    }
}

fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '~' | '+' | '/' | '=')
}

/// Each `prefix` followed by token characters; the range starts `skip`
/// bytes into the match (so `Bearer ` itself stays readable).
fn token_ranges(line: &str, prefix: &str, skip: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for (i, _) in line.match_indices(prefix) {
        let from = i + prefix.len();
        let len: usize = line[from..]
            .chars()
            .take_while(|c| is_token_char(*c))
            .map(char::len_utf8)
            .sum();
        if len > 0 {
            out.push((i + skip, from + len));
        }
    }
    out
}

/// The password of each `scheme://user:password@host`.
fn url_passwords(line: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for (i, _) in line.match_indices("://") {
        let rest = &line[i + 3..];
        let authority_len = rest
            .find(['/', '"', '\'', ' ', '?', '#'])
            .unwrap_or(rest.len());
        let authority = &rest[..authority_len];
        if let Some(at) = authority.rfind('@')
            && let Some(colon) = authority[..at].find(':')
            && colon + 1 < at
        {
            out.push((i + 3 + colon + 1, i + 3 + at));
        }
    }
    out
}

/// The string values of fields whose name holds a secret, in JSON
/// (`"name": "value"`) and TOML (`name = "value"`, inline tables too).
fn secret_values(line: &str) -> Vec<(usize, usize)> {
    let bytes = line.as_bytes();
    let mut out = Vec::new();
    let mut key: Option<String> = None;
    let mut after_sep = false;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'"' || b == b'\'' {
            let start = i + 1;
            let mut j = start;
            while j < bytes.len() && bytes[j] != b {
                if b == b'"' && bytes[j] == b'\\' {
                    j += 1;
                }
                j += 1;
            }
            let end = j.min(bytes.len());
            if after_sep {
                if key.as_deref().is_some_and(is_secret_name) && end > start {
                    out.push((start, end));
                }
                key = None;
                after_sep = false;
            } else {
                key = Some(line[start..end].to_owned());
            }
            i = end + 1;
            continue;
        }
        if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' {
            let start = i;
            while i < bytes.len()
                && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_' || bytes[i] == b'-')
            {
                i += 1;
            }
            if !after_sep {
                key = Some(line[start..i].to_owned());
            } else {
                after_sep = false;
                key = None;
            }
            continue;
        }
        match b {
            b':' | b'=' if key.is_some() => after_sep = true,
            b' ' | b'\t' => {}
            _ => {
                key = None;
                after_sep = false;
            }
        }
        i += 1;
    }
    out
}

fn is_secret_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    SECRET_NAMES.iter().any(|s| lower.contains(s))
        || lower == "key"
        || lower.ends_with("_key")
        || lower.ends_with("-key")
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "dmbg_test_0123456789ab_SECRETsecretSECRET";

    #[test]
    fn masks_keep_only_a_short_tail() {
        assert_eq!(mask(KEY), "dmbg_…CRET");
        assert_eq!(mask("Bearer abc"), "Bearer …");
        assert_eq!(mask("short"), "…");
        assert_eq!(mask("ghp_aaaaaaaaaaaaaaaa1234"), "…1234");
    }

    #[test]
    fn every_kind_of_secret_on_a_line_is_masked() {
        let m = Masker::new([KEY.to_owned()]);
        let cases = [
            format!("+      \"Authorization\": \"Bearer {KEY}\""),
            format!("http_headers = {{ Authorization = \"Bearer {KEY}\" }}"),
            format!("  \"args\": [\"--header\", \"Authorization: Bearer {KEY}\"]"),
            format!("plain {KEY} text"),
            "dmbg_live_abcdef_0123456789abcdefXYZW".to_owned(),
        ];
        for case in &cases {
            let out = m.line(case);
            assert!(!out.contains("SECRET"), "{out}");
            assert!(!out.contains("0123456789abcdef"), "{out}");
            assert!(out.contains('…'), "{out}");
        }
        let other = m.line("   \"GITHUB_PERSONAL_ACCESS_TOKEN\": \"ghp_abcdefghijklmnop1234\",");
        assert_eq!(other, "   \"GITHUB_PERSONAL_ACCESS_TOKEN\": \"…1234\",");
        let toml = m.line("OPENAI_API_KEY = 'sk-abcdefghijklmnopq'");
        assert!(!toml.contains("sk-abc"), "{toml}");
        let url = m.line("\"DOOMBERG_DB\": \"postgres://user:hunter2@db:5432/x\"");
        assert_eq!(url, "\"DOOMBERG_DB\": \"postgres://user:…@db:5432/x\"");
    }

    #[test]
    fn ordinary_lines_are_left_alone() {
        let m = Masker::new([KEY.to_owned()]);
        for line in [
            "  \"command\": \"/usr/local/bin/ithaca\",",
            "  \"url\": \"http://127.0.0.1:8080/mcp\"",
            "command = \"npx\" # a comment: with = signs",
            "  \"ITHACA_DATA_DIR\": \"/home/me/.ithaca\"",
            "",
        ] {
            assert_eq!(m.line(line), line);
        }
    }

    #[test]
    fn odd_input_does_not_panic() {
        let m = Masker::new(["é".to_owned(), String::new()]);
        for line in [
            "\"",
            "'",
            "\"a\": \"",
            "token = \"é",
            "://@",
            "x://a:@",
            "Bearer ",
            "dmbg_",
            "ééé",
        ] {
            let _ = m.line(line);
            let _ = m.text(line);
        }
    }
}
