//! Merging one server entry into Codex's `config.toml` with `toml_edit`,
//! which keeps the document's comments, order and formatting: only the
//! `[mcp_servers.NAME]` table we own changes.

use super::Outcome;
use super::agents::{Entry, OWNED_FIELDS, Val};
use anyhow::Context;
use serde_json::Value as Json;
use toml_edit::{Array, DocumentMut, InlineTable, Item, Table, TableLike, Value};

/// `original` with `entry` as `mcp_servers.name`.
pub fn merge(original: &str, name: &str, entry: &Entry) -> anyhow::Result<Outcome> {
    let mut doc: DocumentMut = if original.trim().is_empty() {
        DocumentMut::new()
    } else {
        original
            .parse()
            .map_err(|e: toml_edit::TomlError| describe(original, &e))?
    };
    let root = doc.as_table_mut();
    if !root.contains_key("mcp_servers") {
        // Implicit: the file gets `[mcp_servers.NAME]`, no empty
        // `[mcp_servers]` header above it.
        let mut servers = Table::new();
        servers.set_implicit(true);
        root.insert("mcp_servers", Item::Table(servers));
    }
    let servers_item = root
        .get_mut("mcp_servers")
        .context("mcp_servers vanished while being added")?;
    let parent_is_table = servers_item.is_table();
    let servers = servers_item
        .as_table_like_mut()
        .context("its `mcp_servers` is not a table; refusing to change it")?;
    match servers.get_mut(name).and_then(Item::as_table_like_mut) {
        Some(existing) => {
            if same_fields(existing, entry) {
                return Ok(Outcome::Unchanged);
            }
            update(existing, entry);
        }
        None => {
            // Absent, or not a table at all: ours replaces it.
            let item = if parent_is_table {
                Item::Table(table_of(entry))
            } else {
                Item::Value(Value::InlineTable(inline_of(entry)))
            };
            servers.insert(name, item);
        }
    }
    let out = doc.to_string();
    if out == original {
        return Ok(Outcome::Unchanged);
    }
    Ok(Outcome::Changed(out))
}

/// A file holding only this entry.
pub fn snippet(name: &str, entry: &Entry) -> String {
    let mut doc = DocumentMut::new();
    let mut servers = Table::new();
    servers.set_implicit(true);
    servers.insert(name, Item::Table(table_of(entry)));
    doc.as_table_mut()
        .insert("mcp_servers", Item::Table(servers));
    doc.to_string()
}

/// A parse error with its line and column, without the source line
/// `toml_edit` would quote: that line may hold a secret.
fn describe(text: &str, err: &toml_edit::TomlError) -> anyhow::Error {
    let message = err.message().trim();
    match err.span() {
        Some(span) => {
            // A byte offset; never slice inside a character.
            let mut at = span.start.min(text.len());
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            let before = &text[..at];
            let line = before.matches('\n').count() + 1;
            let column = before.chars().rev().take_while(|c| *c != '\n').count() + 1;
            anyhow::anyhow!("not valid TOML at line {line}, column {column}: {message}")
        }
        None => anyhow::anyhow!("not valid TOML: {message}"),
    }
}

/// Whether the existing entry has exactly our fields (see json.rs).
fn same_fields(existing: &dyn TableLike, entry: &Entry) -> bool {
    OWNED_FIELDS
        .iter()
        .all(|field| existing.get(field).and_then(item_json) == entry.get(field).map(Val::to_json))
}

/// Change only the fields that differ, so the comments on the others stay;
/// fields we do not own are the user's and stay too.
fn update(existing: &mut dyn TableLike, entry: &Entry) {
    for field in OWNED_FIELDS {
        if entry.get(field).is_none() {
            existing.remove(field);
        }
    }
    for (key, val) in &entry.fields {
        if existing.get(key).and_then(item_json) != Some(val.to_json()) {
            existing.insert(key, Item::Value(value_of(val)));
        }
    }
}

fn table_of(entry: &Entry) -> Table {
    let mut table = Table::new();
    for (key, val) in &entry.fields {
        table.insert(key, Item::Value(value_of(val)));
    }
    table
}

fn inline_of(entry: &Entry) -> InlineTable {
    let mut table = InlineTable::new();
    for (key, val) in &entry.fields {
        table.insert(key.as_str(), value_of(val));
    }
    table
}

fn value_of(val: &Val) -> Value {
    match val {
        Val::Str(s) => Value::from(s.as_str()),
        Val::List(items) => Value::Array(items.iter().map(String::as_str).collect::<Array>()),
        Val::Map(pairs) => {
            let mut table = InlineTable::new();
            for (k, v) in pairs {
                table.insert(k.as_str(), Value::from(v.as_str()));
            }
            Value::InlineTable(table)
        }
    }
}

/// A TOML item as JSON, to compare with what we would write.
fn item_json(item: &Item) -> Option<Json> {
    match item {
        Item::None => None,
        Item::Value(value) => Some(value_json(value)),
        Item::Table(table) => Some(table_json(table.iter())),
        Item::ArrayOfTables(tables) => Some(Json::Array(
            tables.iter().map(|t| table_json(t.iter())).collect(),
        )),
    }
}

fn table_json<'a>(items: impl Iterator<Item = (&'a str, &'a Item)>) -> Json {
    Json::Object(
        items
            .filter_map(|(k, item)| item_json(item).map(|j| (k.to_owned(), j)))
            .collect(),
    )
}

fn value_json(value: &Value) -> Json {
    match value {
        Value::String(s) => Json::String(s.value().clone()),
        Value::Integer(i) => Json::from(*i.value()),
        Value::Float(f) => {
            serde_json::Number::from_f64(*f.value()).map_or(Json::Null, Json::Number)
        }
        Value::Boolean(b) => Json::Bool(*b.value()),
        Value::Datetime(d) => Json::String(d.value().to_string()),
        Value::Array(items) => Json::Array(items.iter().map(value_json).collect()),
        Value::InlineTable(table) => Json::Object(
            table
                .iter()
                .map(|(k, v)| (k.to_owned(), value_json(v)))
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connect::tests::{changed, stdio_entry as stdio};

    fn http() -> Entry {
        Entry {
            fields: vec![
                (
                    "url".to_owned(),
                    Val::Str("http://127.0.0.1:8080/mcp".to_owned()),
                ),
                (
                    "http_headers".to_owned(),
                    Val::Map(vec![("Authorization".to_owned(), "Bearer k".to_owned())]),
                ),
            ],
        }
    }

    fn parse(text: &str) -> DocumentMut {
        text.parse().expect("valid TOML")
    }

    #[test]
    fn a_new_file_has_one_table() {
        let text = changed(merge("", "doomberg", &stdio()).expect("merge"));
        assert!(text.starts_with("[mcp_servers.doomberg]\n"), "{text}");
        assert!(!text.contains("[mcp_servers]\n"), "{text}");
        let doc = parse(&text);
        assert_eq!(
            doc["mcp_servers"]["doomberg"]["command"].as_str(),
            Some("/bin/ithaca")
        );
        assert_eq!(
            doc["mcp_servers"]["doomberg"]["args"][0].as_str(),
            Some("mcp")
        );
        assert_eq!(
            doc["mcp_servers"]["doomberg"]["env"]["ITHACA_DATA_DIR"].as_str(),
            Some("/d")
        );
        assert_eq!(text, snippet("doomberg", &stdio()));
    }

    #[test]
    fn comments_other_servers_and_settings_survive() {
        let original = "# my codex\nmodel = \"o3\" # the best\n\n[mcp_servers.other]\n# theirs\ncommand = \"npx\"\n\n[profiles.fast]\nmodel = \"mini\"\n";
        let text = changed(merge(original, "doomberg", &stdio()).expect("merge"));
        for kept in [
            "# my codex\n",
            "model = \"o3\" # the best\n",
            "[mcp_servers.other]\n# theirs\ncommand = \"npx\"\n",
            "[profiles.fast]\nmodel = \"mini\"\n",
        ] {
            assert!(text.contains(kept), "{kept:?} lost from {text}");
        }
        let doc = parse(&text);
        assert_eq!(
            doc["mcp_servers"]["doomberg"]["command"].as_str(),
            Some("/bin/ithaca")
        );
        assert_eq!(doc["mcp_servers"]["other"]["command"].as_str(), Some("npx"));
        assert!(matches!(
            merge(&text, "doomberg", &stdio()).expect("merge"),
            Outcome::Unchanged
        ));
    }

    #[test]
    fn switching_transport_replaces_our_fields_only() {
        let first = changed(merge("", "doomberg", &stdio()).expect("merge"));
        let with_extra = format!("{first}startup_timeout_sec = 20\n");
        let text = changed(merge(&with_extra, "doomberg", &http()).expect("merge"));
        let doc = parse(&text);
        let ours = &doc["mcp_servers"]["doomberg"];
        assert!(ours.get("command").is_none(), "{text}");
        assert!(ours.get("env").is_none(), "{text}");
        assert_eq!(ours["url"].as_str(), Some("http://127.0.0.1:8080/mcp"));
        assert_eq!(
            ours["http_headers"]["Authorization"].as_str(),
            Some("Bearer k")
        );
        assert_eq!(ours["startup_timeout_sec"].as_integer(), Some(20));
        assert!(matches!(
            merge(&text, "doomberg", &http()).expect("merge"),
            Outcome::Unchanged
        ));
    }

    #[test]
    fn inline_server_tables_and_sub_tables_are_understood() {
        let inline = "mcp_servers = { other = { command = \"x\" } }\n";
        let text = changed(merge(inline, "doomberg", &stdio()).expect("merge"));
        let doc = parse(&text);
        assert_eq!(
            doc["mcp_servers"]["doomberg"]["command"].as_str(),
            Some("/bin/ithaca")
        );
        assert_eq!(doc["mcp_servers"]["other"]["command"].as_str(), Some("x"));

        let sub = "[mcp_servers.doomberg]\ncommand = \"/bin/ithaca\"\nargs = [\"mcp\"]\n\n[mcp_servers.doomberg.env]\nITHACA_DATA_DIR = \"/d\"\n";
        assert!(matches!(
            merge(sub, "doomberg", &stdio()).expect("merge"),
            Outcome::Unchanged
        ));
    }

    /// Every prefix of a file, and the file with a character inserted
    /// anywhere, is refused or merged into a file that parses and holds our
    /// entry.
    #[test]
    fn any_damage_is_refused_or_merged_into_valid_toml() {
        let sample = "# c\nmodel = \"o3\"\n[mcp_servers.doomberg]\nurl = \"u\" # ours\nx = [1, {a = 'b'}]\n[mcp_servers.o]\ncommand = \"\"\"m\nl\"\"\"\n";
        let mut inputs: Vec<String> = (0..=sample.len()).map(|i| sample[..i].to_owned()).collect();
        for i in 0..=sample.len() {
            for c in ['[', ']', '=', '"', '\'', '#', '{', '}', '.', '\n', 'é'] {
                let mut damaged = sample.to_owned();
                damaged.insert(i, c);
                inputs.push(damaged);
            }
        }
        let mut merged = 0;
        for input in &inputs {
            if let Ok(Outcome::Changed(text)) = merge(input, "doomberg", &stdio()) {
                merged += 1;
                let doc = parse(&text);
                assert_eq!(
                    doc["mcp_servers"]["doomberg"]["command"].as_str(),
                    Some("/bin/ithaca"),
                    "{text}"
                );
            }
        }
        assert!(merged > 50, "only {merged} inputs merged");
    }

    #[test]
    fn malformed_files_are_refused_without_quoting_them() {
        let err = merge("a = 1\nbearer = \"dmbg_secret\n", "doomberg", &stdio())
            .expect_err("unterminated string");
        let message = err.to_string();
        assert!(message.contains("line 2"), "{message}");
        assert!(!message.contains("dmbg_secret"), "{message}");
        assert!(merge("mcp_servers = 3\n", "doomberg", &stdio()).is_err());
        assert!(merge("[a]\n[a]\n", "doomberg", &stdio()).is_err());
    }
}
