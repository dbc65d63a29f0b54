//! A resource or resource template: its URI template, split once into
//! literal and variable parts, and how a URI matches it.

use super::BASE_SCOPE;
use prost_reflect::MethodDescriptor;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// One resource or resource template.
#[derive(Clone, Debug)]
pub struct Resource {
    pub uri_template: String,
    pub name: String,
    pub title: String,
    pub description: String,
    pub mime_type: String,
    pub scope: String,
    pub method: MethodDescriptor,
    /// The RPC that reports changes (`watch.proto`), when the service has
    /// one: then the resource is subscribable.
    pub watch: Option<MethodDescriptor>,
    /// Literal and variable parts of the template, in order.
    pub(super) parts: Vec<Part>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Part {
    Literal(String),
    Variable(String),
}

impl Resource {
    pub fn is_template(&self) -> bool {
        self.parts.iter().any(|p| matches!(p, Part::Variable(_)))
    }

    /// The variables of `uri` if it matches this template. A variable
    /// matches one or more characters other than `/`.
    pub fn matches(&self, uri: &str) -> Option<BTreeMap<String, String>> {
        let mut rest = uri;
        let mut vars = BTreeMap::new();
        let mut parts = self.parts.iter().peekable();
        while let Some(part) = parts.next() {
            match part {
                Part::Literal(lit) => rest = rest.strip_prefix(lit.as_str())?,
                Part::Variable(name) => {
                    let end = match parts.peek() {
                        Some(Part::Literal(next)) => rest.find(next.as_str())?,
                        _ => rest.len(),
                    };
                    let value = &rest[..end];
                    if value.is_empty() || value.contains('/') {
                        return None;
                    }
                    vars.insert(name.clone(), value.to_owned());
                    rest = &rest[end..];
                }
            }
        }
        rest.is_empty().then_some(vars)
    }

    pub fn scopes(&self) -> Vec<&str> {
        let mut scopes = vec![BASE_SCOPE];
        if !self.scope.is_empty() && self.scope != BASE_SCOPE {
            scopes.push(self.scope.as_str());
        }
        scopes
    }

    /// Whether clients may subscribe to it: its service reports changes.
    pub fn subscribable(&self) -> bool {
        self.watch.is_some()
    }

    /// The `resources/list` or `resources/templates/list` entry.
    pub fn to_json(&self) -> Value {
        let key = if self.is_template() {
            "uriTemplate"
        } else {
            "uri"
        };
        let mut entry = json!({
            key: self.uri_template,
            "name": self.name,
            "mimeType": self.mime_type,
        });
        if !self.title.is_empty() {
            entry["title"] = json!(self.title);
        }
        if !self.description.is_empty() {
            entry["description"] = json!(self.description);
        }
        entry
    }
}

/// Split `a/{b}/c` into literals and variables (RFC 6570 level 1).
pub(super) fn parse_template(template: &str) -> Option<Vec<Part>> {
    let mut parts = Vec::new();
    let mut rest = template;
    while !rest.is_empty() {
        match rest.find('{') {
            Some(0) => {
                let end = rest.find('}')?;
                let name = &rest[1..end];
                let valid = !name.is_empty()
                    && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
                if !valid || matches!(parts.last(), Some(Part::Variable(_))) {
                    return None;
                }
                parts.push(Part::Variable(name.to_owned()));
                rest = &rest[end + 1..];
            }
            Some(i) => {
                parts.push(Part::Literal(rest[..i].to_owned()));
                rest = &rest[i..];
            }
            None => {
                if rest.contains('}') {
                    return None;
                }
                parts.push(Part::Literal(rest.to_owned()));
                rest = "";
            }
        }
    }
    (!parts.is_empty()).then_some(parts)
}
