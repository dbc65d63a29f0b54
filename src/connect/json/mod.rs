//! Merging one server entry into an agent's JSON file by editing its text
//! in place.
//!
//! The file is parsed for validation only; the change is a splice at the
//! byte offsets of the one object we touch. Everything else (the user's
//! other servers and settings, their order, indentation, line endings and,
//! where the agent allows them, comments) is the original text, untouched.
//! Re-serialising the whole document would sort or reflow a file such as
//! `~/.claude.json` that holds far more than MCP servers.

mod scan;

use super::Outcome;
use super::agents::{Entry, OWNED_FIELDS, Val};
use anyhow::{Context, bail};
use scan::{Member, Node, Parser, blank_comments};
use serde_json::Value;
use std::fmt::Write as _;

/// `original` with `entry` as `servers_key.name`. With `comments`, `//`
/// and `/* */` comments and trailing commas are accepted and kept.
pub fn merge(
    original: &str,
    servers_key: &str,
    name: &str,
    entry: &Entry,
    comments: bool,
) -> anyhow::Result<Outcome> {
    let (bom, body) = match original.strip_prefix('\u{feff}') {
        Some(rest) => ("\u{feff}", rest),
        None => ("", original),
    };
    if body.trim().is_empty() {
        return Ok(Outcome::Changed(format!(
            "{bom}{}",
            snippet(servers_key, name, entry)
        )));
    }
    // Comments and trailing commas become spaces: offsets stay the same,
    // and what remains is strict JSON.
    let plain = if comments {
        blank_comments(body)?
    } else {
        body.to_owned()
    };
    let value: Value = serde_json::from_str(&plain).map_err(|e| {
        let what = if comments {
            "JSON (even allowing comments and trailing commas)"
        } else {
            "JSON"
        };
        anyhow::anyhow!("not valid {what}: {e}")
    })?;
    if !value.is_object() {
        bail!("its top level is not a JSON object");
    }
    let root = Parser::new(&plain).document()?;
    let style = Style::detect(body);
    let edit = match unique(&root, servers_key)? {
        None => {
            let inner = |indent: &str| {
                let deeper = format!("{indent}{}", style.unit);
                let entry = render_entry(entry, &[], &deeper, &style);
                if style.compact {
                    format!("{}:{{{}:{entry}}}", quote(servers_key), quote(name))
                } else {
                    format!(
                        "{}: {{{nl}{deeper}{}: {entry}{nl}{indent}}}",
                        quote(servers_key),
                        quote(name),
                        nl = style.nl
                    )
                }
            };
            insert_member(body, &root, inner, &style)
        }
        Some(servers) if servers.value.members.is_none() => {
            bail!("its \"{servers_key}\" is not an object; refusing to change it")
        }
        Some(servers) => match unique(&servers.value, name)? {
            None => {
                let member = |indent: &str| {
                    let sep = if style.compact { ":" } else { ": " };
                    format!(
                        "{}{sep}{}",
                        quote(name),
                        render_entry(entry, &[], indent, &style)
                    )
                };
                insert_member(body, &servers.value, member, &style)
            }
            Some(ours) => {
                let existing: Value = serde_json::from_str(ours.value.text(&plain))
                    .context("reading the existing entry")?;
                if same_fields(&existing, entry) {
                    return Ok(Outcome::Unchanged);
                }
                // The user's own fields of our entry (a `timeout`, a
                // `disabled` flag) are kept, in their original text.
                let extras: Vec<(&str, &str)> = ours
                    .value
                    .members
                    .iter()
                    .flatten()
                    .filter(|m| !OWNED_FIELDS.contains(&m.key.as_str()))
                    .map(|m| (&body[m.key_start..m.key_end], m.value.text(body)))
                    .collect();
                let indent = own_line_indent(body, ours.key_start)
                    .map(str::to_owned)
                    .unwrap_or_else(|| line_lead(body, ours.key_start).to_owned());
                let text = render_entry(entry, &extras, &indent, &style);
                Edit {
                    at: ours.value.start,
                    remove: ours.value.end - ours.value.start,
                    insert: text,
                }
            }
        },
    };
    let mut out = String::with_capacity(original.len() + edit.insert.len());
    out.push_str(bom);
    out.push_str(&body[..edit.at]);
    out.push_str(&edit.insert);
    out.push_str(&body[edit.at + edit.remove..]);
    if out == original {
        return Ok(Outcome::Unchanged);
    }
    Ok(Outcome::Changed(out))
}

/// A whole file holding only this entry: `{"servers_key": {"name": …}}`,
/// pretty-printed with two spaces.
pub fn snippet(servers_key: &str, name: &str, entry: &Entry) -> String {
    let style = Style {
        nl: "\n",
        unit: "  ".to_owned(),
        compact: false,
    };
    format!(
        "{{\n  {}: {{\n    {}: {}\n  }}\n}}\n",
        quote(servers_key),
        quote(name),
        render_entry(entry, &[], "    ", &style)
    )
}

/// Whether the file's entry already has exactly our fields: the same value
/// for each field we write, and none of the fields we own but do not write.
fn same_fields(existing: &Value, entry: &Entry) -> bool {
    let Some(object) = existing.as_object() else {
        return false;
    };
    OWNED_FIELDS
        .iter()
        .all(|field| object.get(*field) == entry.get(field).map(Val::to_json).as_ref())
}

/// One replacement in the text.
struct Edit {
    at: usize,
    remove: usize,
    insert: String,
}

/// How the file is laid out, so what we add looks like what is there.
struct Style {
    nl: &'static str,
    /// One level of indentation (the file's first indented line's).
    unit: String,
    /// The whole document on one line.
    compact: bool,
}

impl Style {
    fn detect(text: &str) -> Style {
        let unit = text
            .lines()
            .filter(|line| !line.trim().is_empty())
            .map(|line| {
                let content = line.trim_start_matches([' ', '\t']);
                &line[..line.len() - content.len()]
            })
            .find(|lead| !lead.is_empty())
            .unwrap_or("  ")
            .to_owned();
        Style {
            nl: if text.contains("\r\n") { "\r\n" } else { "\n" },
            unit,
            compact: !text.trim().contains('\n'),
        }
    }
}

/// Add a member to `object`; `member(indent)` renders it at that indent.
fn insert_member(
    body: &str,
    object: &Node,
    member: impl Fn(&str) -> String,
    style: &Style,
) -> Edit {
    let members = object.members.as_deref().unwrap_or_default();
    let lead = line_lead(body, object.start);
    let nested = format!("{lead}{}", style.unit);
    match (members.first(), members.last()) {
        (Some(first), Some(last)) => {
            let indent = own_line_indent(body, first.key_start).unwrap_or(&nested);
            let text = if style.compact {
                format!(",{}", member(indent))
            } else {
                format!(",{}{indent}{}", style.nl, member(indent))
            };
            Edit {
                at: last.value.end,
                remove: 0,
                insert: text,
            }
        }
        _ => {
            let open = object.start + 1;
            let close = object.end.saturating_sub(1).max(open);
            let inside = &body[open..close];
            if style.compact {
                Edit {
                    at: open,
                    remove: inside.len(),
                    insert: member(&nested),
                }
            } else if inside.trim().is_empty() {
                Edit {
                    at: open,
                    remove: inside.len(),
                    insert: format!("{nl}{nested}{}{nl}{lead}", member(&nested), nl = style.nl),
                }
            } else {
                // Only comments inside: keep them after the new member.
                Edit {
                    at: open,
                    remove: 0,
                    insert: format!("{}{nested}{}", style.nl, member(&nested)),
                }
            }
        }
    }
}

/// An entry as a JSON object at `indent`: our fields, then the user's
/// `extras` (raw key and value text).
fn render_entry(entry: &Entry, extras: &[(&str, &str)], indent: &str, style: &Style) -> String {
    let inner = format!("{indent}{}", style.unit);
    let mut parts: Vec<String> = entry
        .fields
        .iter()
        .map(|(k, v)| {
            let sep = if style.compact { ":" } else { ": " };
            format!("{}{sep}{}", quote(k), render_val(v, &inner, style))
        })
        .collect();
    parts.extend(extras.iter().map(|(k, v)| {
        let sep = if style.compact { ":" } else { ": " };
        format!("{k}{sep}{v}")
    }));
    block('{', '}', &parts, indent, style)
}

fn render_val(val: &Val, indent: &str, style: &Style) -> String {
    match val {
        Val::Str(s) => quote(s),
        Val::List(items) => {
            let parts: Vec<String> = items.iter().map(|s| quote(s)).collect();
            block('[', ']', &parts, indent, style)
        }
        Val::Map(pairs) => {
            let sep = if style.compact { ":" } else { ": " };
            let parts: Vec<String> = pairs
                .iter()
                .map(|(k, v)| format!("{}{sep}{}", quote(k), quote(v)))
                .collect();
            block('{', '}', &parts, indent, style)
        }
    }
}

fn block(open: char, close: char, parts: &[String], indent: &str, style: &Style) -> String {
    if parts.is_empty() {
        return format!("{open}{close}");
    }
    if style.compact {
        return format!("{open}{}{close}", parts.join(","));
    }
    let inner = format!("{indent}{}", style.unit);
    let mut out = String::new();
    out.push(open);
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(style.nl);
        out.push_str(&inner);
        out.push_str(part);
    }
    out.push_str(style.nl);
    out.push_str(indent);
    out.push(close);
    out
}

/// A JSON string literal.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The member `key` of `object`, refusing a key given twice (readers
/// disagree on which one wins).
fn unique<'n>(object: &'n Node, key: &str) -> anyhow::Result<Option<&'n Member>> {
    let mut found = object.members.iter().flatten().filter(|m| m.key == key);
    let first = found.next();
    if found.next().is_some() {
        bail!("it has \"{key}\" twice in one object; refusing to guess which one counts");
    }
    Ok(first)
}

/// The whitespace before `pos` when nothing else precedes it on its line.
fn own_line_indent(text: &str, pos: usize) -> Option<&str> {
    let start = text[..pos].rfind('\n').map_or(0, |i| i + 1);
    let lead = &text[start..pos];
    lead.bytes()
        .all(|b| b == b' ' || b == b'\t')
        .then_some(lead)
}

/// The leading whitespace of the line holding `pos`.
fn line_lead(text: &str, pos: usize) -> &str {
    let start = text[..pos].rfind('\n').map_or(0, |i| i + 1);
    let line = &text[start..];
    let content = line.trim_start_matches([' ', '\t']);
    &line[..line.len() - content.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connect::tests::{changed, stdio_entry as entry};

    fn merged(original: &str, comments: bool) -> String {
        changed(merge(original, "mcpServers", "doomberg", &entry(), comments).expect("merge"))
    }

    fn parse(text: &str) -> Value {
        serde_json::from_str(text).expect("valid JSON")
    }

    #[test]
    fn a_new_file_holds_only_our_server() {
        let text = merged("", false);
        let v = parse(&text);
        assert_eq!(v["mcpServers"]["doomberg"]["command"], "/bin/ithaca");
        assert_eq!(v["mcpServers"]["doomberg"]["args"][0], "mcp");
        assert_eq!(v["mcpServers"]["doomberg"]["env"]["ITHACA_DATA_DIR"], "/d");
        assert_eq!(text, snippet("mcpServers", "doomberg", &entry()));
        assert!(text.ends_with("}\n"));
    }

    #[test]
    fn other_servers_and_settings_keep_their_text_and_order() {
        let original = "{\n    \"zeta\": 1,\n    \"mcpServers\": {\n        \"other\": {\"command\": \"x\"}\n    },\n    \"alpha\": [1, 2]\n}\n";
        let text = merged(original, false);
        let v = parse(&text);
        assert_eq!(v["mcpServers"]["other"]["command"], "x");
        assert_eq!(v["zeta"], 1);
        assert_eq!(v["alpha"][1], 2);
        // The original text is all there, in order, and our entry is
        // indented like its neighbour.
        assert!(text.starts_with("{\n    \"zeta\": 1,\n    \"mcpServers\": {\n        \"other\": {\"command\": \"x\"},\n        \"doomberg\": {\n            \"command\": \"/bin/ithaca\",\n"), "{text}");
        assert!(
            text.ends_with("    },\n    \"alpha\": [1, 2]\n}\n"),
            "{text}"
        );
        // A second merge of the result changes nothing.
        let again = merge(&text, "mcpServers", "doomberg", &entry(), false).expect("merge");
        assert!(matches!(again, Outcome::Unchanged));
    }

    #[test]
    fn servers_key_is_added_when_missing_and_empty_objects_filled() {
        let text = merged("{\n  \"theme\": \"dark\"\n}", false);
        let v = parse(&text);
        assert_eq!(v["theme"], "dark");
        assert_eq!(v["mcpServers"]["doomberg"]["args"][0], "mcp");
        assert!(
            text.contains("\n  \"mcpServers\": {\n    \"doomberg\": {\n      \"command\""),
            "{text}"
        );

        let text = merged("{}", false);
        assert_eq!(
            parse(&text)["mcpServers"]["doomberg"]["command"],
            "/bin/ithaca"
        );
        let text = merged("{\n  \"mcpServers\": {}\n}\n", false);
        assert_eq!(
            parse(&text)["mcpServers"]["doomberg"]["command"],
            "/bin/ithaca"
        );
        assert!(text.ends_with("  }\n}\n"), "{text}");
    }

    #[test]
    fn our_entry_is_replaced_and_the_users_extra_fields_kept() {
        let original = "{\"mcpServers\": {\"doomberg\": {\"url\": \"http://old\", \"timeout\": 5000, \"trust\": true}, \"b\": {}}}";
        let text = merged(original, false);
        let v = parse(&text);
        let ours = &v["mcpServers"]["doomberg"];
        assert_eq!(ours["command"], "/bin/ithaca");
        assert!(ours.get("url").is_none(), "{text}");
        assert_eq!(ours["timeout"], 5000);
        assert_eq!(ours["trust"], true);
        assert!(v["mcpServers"]["b"].is_object());
        let again = merge(&text, "mcpServers", "doomberg", &entry(), false).expect("merge");
        assert!(matches!(again, Outcome::Unchanged));
    }

    #[test]
    fn malformed_files_are_refused() {
        for bad in [
            "{\"mcpServers\": {",
            "{\"a\": 1,}",
            "[1, 2]",
            "{\"mcpServers\": []}",
            "{\"mcpServers\": {}, \"mcpServers\": {}}",
            "// note\n{}",
            "\u{0}",
        ] {
            let err = merge(bad, "mcpServers", "doomberg", &entry(), false);
            assert!(err.is_err(), "{bad:?} was accepted");
        }
        let err = merge(
            "{\n  \"a\": 1\n  \"b\": 2\n}",
            "mcpServers",
            "x",
            &entry(),
            false,
        )
        .expect_err("missing comma");
        assert!(err.to_string().contains("line 3"), "{err}");
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(merge(&deep, "mcpServers", "x", &entry(), false).is_err());
    }

    #[test]
    fn comments_and_trailing_commas_survive_where_allowed() {
        let original = "{\n  // my servers\n  \"servers\": {\n    /* theirs */\n    \"other\": {\"url\": \"http://x/*y*/\"}, // keep\n  },\n}\n";
        let text = changed(merge(original, "servers", "doomberg", &entry(), true).expect("merge"));
        assert!(text.contains("// my servers"), "{text}");
        assert!(text.contains("/* theirs */"), "{text}");
        assert!(text.contains("// keep"), "{text}");
        assert!(text.contains("\"url\": \"http://x/*y*/\""), "{text}");
        let plain = blank_comments(&text).expect("blank");
        let v = parse(&plain);
        assert_eq!(v["servers"]["doomberg"]["command"], "/bin/ithaca");
        assert_eq!(v["servers"]["other"]["url"], "http://x/*y*/");
        // Strict agents refuse the same file.
        assert!(merge(original, "servers", "doomberg", &entry(), false).is_err());
        assert!(merge("{ /* open", "servers", "d", &entry(), true).is_err());
    }

    #[test]
    fn layout_follows_the_file() {
        let crlf = "{\r\n\t\"mcpServers\": {\r\n\t\t\"a\": {}\r\n\t}\r\n}\r\n";
        let text = merged(crlf, false);
        assert!(!text.replace("\r\n", "").contains('\n'), "{text:?}");
        assert!(
            text.contains("\r\n\t\t\"doomberg\": {\r\n\t\t\t\"command\""),
            "{text:?}"
        );
        let compact = merged("{\"a\":1}", false);
        assert!(!compact.contains('\n'), "{compact}");
        assert_eq!(
            parse(&compact)["mcpServers"]["doomberg"]["env"]["ITHACA_DATA_DIR"],
            "/d"
        );
        let bom = merged("\u{feff}{}", false);
        assert!(bom.starts_with('\u{feff}'));
    }

    /// Every prefix of a file, and the file with a structural character
    /// inserted anywhere, is either refused or merged into a file that
    /// parses and holds our entry: never a panic, never a broken file.
    #[test]
    fn any_damage_is_refused_or_merged_into_valid_json() {
        let sample = "{\n  // c\n  \"a\": [1, {\"b\": \"x\\\"y\"}],\n  \"mcpServers\": {\n    \"doomberg\": {\"url\": \"u\", \"t\": 1},\n    \"o\": {} /* d */,\n  },\n}\n";
        let mut inputs: Vec<String> = (0..=sample.len())
            .filter(|i| sample.is_char_boundary(*i))
            .map(|i| sample[..i].to_owned())
            .collect();
        for i in (0..=sample.len()).filter(|i| sample.is_char_boundary(*i)) {
            for c in ['{', '}', '[', ']', ',', ':', '"', '/', '*', '\\', 'é', '\n'] {
                let mut damaged = sample.to_owned();
                damaged.insert(i, c);
                inputs.push(damaged);
            }
        }
        let mut merged_count = 0;
        for input in &inputs {
            for comments in [false, true] {
                let Ok(outcome) = merge(input, "mcpServers", "doomberg", &entry(), comments) else {
                    continue;
                };
                let text = match outcome {
                    Outcome::Changed(text) => text,
                    Outcome::Unchanged => continue,
                };
                merged_count += 1;
                let plain = if comments {
                    blank_comments(&text).expect("our output blanks")
                } else {
                    text.clone()
                };
                let v: Value = serde_json::from_str(&plain)
                    .unwrap_or_else(|e| panic!("broken output ({e}) from {input:?}:\n{text}"));
                assert_eq!(
                    v["mcpServers"]["doomberg"]["command"], "/bin/ithaca",
                    "{text}"
                );
            }
        }
        assert!(merged_count > 100, "only {merged_count} inputs merged");
    }

    #[test]
    fn quoting_escapes_what_json_needs() {
        let odd = "a\"b\\c\nd\u{1}é";
        let q = quote(odd);
        assert_eq!(serde_json::from_str::<String>(&q).expect("valid"), odd);
    }
}
