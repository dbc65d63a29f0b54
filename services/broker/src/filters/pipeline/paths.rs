//! What a pipeline's paths are checked against: the flattened alert schema
//! (types by plain dotted path), the shape of the document after each stage
//! (fields added, fields projected away), and the nearest real path to
//! suggest for a misspelt one.

use crate::alerts::schema::FlatField;
use std::collections::HashMap;

/// The class of a value, as far as comparisons and arithmetic care.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Kind {
    Number,
    String,
    Bool,
    Bytes,
    Record,
    Map,
    Array(Box<Kind>),
    /// Unknown (a union of several types, a computed value of unknown type).
    Any,
}

impl Kind {
    pub fn from_avro(t: &str) -> Kind {
        match t {
            "int" | "long" | "float" | "double" => Kind::Number,
            "string" | "enum" => Kind::String,
            "boolean" => Kind::Bool,
            "bytes" | "fixed" => Kind::Bytes,
            "record" => Kind::Record,
            _ => {
                if let Some(inner) = t.strip_prefix("array<").and_then(|r| r.strip_suffix('>')) {
                    Kind::Array(Box::new(Kind::from_avro(inner)))
                } else if t.starts_with("map<") {
                    Kind::Map
                } else {
                    Kind::Any
                }
            }
        }
    }

    /// How a message names it.
    pub fn describe(&self) -> String {
        match self {
            Kind::Number => "a number".into(),
            Kind::String => "a string".into(),
            Kind::Bool => "a boolean".into(),
            Kind::Bytes => "bytes (an image cutout)".into(),
            Kind::Record => "a record".into(),
            Kind::Map => "a map".into(),
            Kind::Array(inner) => format!("an array of {}", inner.describe_plural()),
            Kind::Any => "of any type".into(),
        }
    }

    fn describe_plural(&self) -> String {
        match self {
            Kind::Number => "numbers".into(),
            Kind::String => "strings".into(),
            Kind::Bool => "booleans".into(),
            Kind::Record => "records".into(),
            other => other.describe(),
        }
    }

    /// The kind of the values a comparison meets: an array's elements.
    pub fn element(&self) -> &Kind {
        match self {
            Kind::Array(inner) => inner.element(),
            other => other,
        }
    }
}

/// One schema path's type.
#[derive(Clone, Debug)]
pub(crate) struct FieldInfo {
    pub kind: Kind,
    /// Inside an array of records (`prv_candidates.magpsf`): an expression
    /// reading it gets an array.
    pub in_array: bool,
    /// The Avro type as the schema says it (`double`, `array<record>`).
    pub avro_type: String,
}

/// The alert schema by plain path (`candidate.magpsf`), merged over the
/// versions given.
#[derive(Clone, Debug, Default)]
pub(crate) struct SchemaIndex {
    fields: HashMap<String, FieldInfo>,
    /// Every plain path, in schema order, for suggestions.
    names: Vec<String>,
}

impl SchemaIndex {
    pub fn new(schema: &[FlatField]) -> SchemaIndex {
        let mut index = SchemaIndex::default();
        for f in schema {
            let kind = Kind::from_avro(&f.avro_type);
            match index.fields.get_mut(&f.field) {
                Some(known) => {
                    // Two versions that disagree on a field's class leave it
                    // unchecked rather than refuse a version's real values.
                    if known.kind != kind {
                        known.kind = Kind::Any;
                    }
                }
                None => {
                    index.names.push(f.field.clone());
                    index.fields.insert(
                        f.field.clone(),
                        FieldInfo {
                            kind,
                            in_array: f.path.trim_end_matches(['?', '[', ']']).contains("[]"),
                            avro_type: f.avro_type.clone(),
                        },
                    );
                }
            }
        }
        index
    }

    pub fn get(&self, field: &str) -> Option<&FieldInfo> {
        self.fields.get(field)
    }

    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// The real path nearest to `wanted` by edit distance, when one is near
    /// enough to be what was meant. A bare field name (`magpsf`) is also
    /// compared with each path's last segment, so the missing `candidate.`
    /// is found.
    pub fn suggest(&self, wanted: &str, extra: &[String]) -> Option<String> {
        let bare = !wanted.contains('.');
        let mut best: Option<(usize, &str)> = None;
        for name in self.names.iter().chain(extra.iter()) {
            if self.fields.get(name).is_some_and(|f| f.kind == Kind::Bytes) {
                continue;
            }
            let mut d = distance(wanted, name);
            if bare && let Some((_, last)) = name.rsplit_once('.') {
                d = d.min(distance(wanted, last) + 1);
            }
            if best.is_none_or(|(b, n)| d < b || (d == b && name.len() < n.len())) {
                best = Some((d, name));
            }
        }
        let (d, name) = best?;
        let budget = (wanted.chars().count() / 3).max(2);
        (d <= budget && d > 0).then(|| name.to_owned())
    }
}

/// Levenshtein distance over characters, one row at a time.
pub(crate) fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let here = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != cb)).min(row[j] + 1).min(here + 1);
            prev = here;
        }
    }
    row[b.len()]
}

/// The nearest of `names` to `wanted`, for stage and operator names.
pub(crate) fn nearest<'a>(wanted: &str, names: &[&'a str]) -> Option<&'a str> {
    let (d, name) = names
        .iter()
        .map(|n| (distance(wanted, n), *n))
        .min_by_key(|(d, _)| *d)?;
    (d <= (wanted.len() / 3).max(2)).then_some(name)
}

/// `prefix` is `path` or one of its parents.
pub(crate) fn under(path: &str, prefix: &str) -> bool {
    path == prefix
        || (path.len() > prefix.len()
            && path.starts_with(prefix)
            && path.as_bytes()[prefix.len()] == b'.')
}

/// A projection seen so far, for telling what later stages can still see.
#[derive(Clone, Debug)]
enum View {
    Keep(Vec<String>),
    Drop(Vec<String>),
}

/// The document's shape after the stages compiled so far.
#[derive(Clone, Debug, Default)]
pub(crate) struct Shape {
    /// Projections, with the index of their stage.
    views: Vec<(usize, View)>,
    /// Fields added by `$addFields` or computed by `$project`, with their kind.
    added: Vec<(String, Kind)>,
}

/// What a path names at some point of the pipeline.
#[derive(Clone, Debug)]
pub(crate) enum Resolved<'a> {
    /// A field of the alert.
    Schema(&'a FieldInfo),
    /// A field an earlier stage added (or a part of one).
    Added(Kind),
    /// A field of the alert that the projection of stage `n` removed.
    Removed(usize),
    Unknown,
}

impl Shape {
    pub fn resolve<'a>(&self, schema: &'a SchemaIndex, field: &str) -> Resolved<'a> {
        for (name, kind) in self.added.iter().rev() {
            if name == field {
                return Resolved::Added(kind.clone());
            }
            if under(field, name) {
                return Resolved::Added(Kind::Any);
            }
            if under(name, field) {
                return Resolved::Added(Kind::Record);
            }
        }
        let Some(info) = schema.get(field) else {
            return Resolved::Unknown;
        };
        for (stage, view) in &self.views {
            let visible = match view {
                View::Keep(keep) => keep.iter().any(|k| under(field, k) || under(k, field)),
                View::Drop(drop) => !drop.iter().any(|d| under(field, d)),
            };
            if !visible {
                return Resolved::Removed(*stage);
            }
        }
        Resolved::Schema(info)
    }

    /// Paths added so far (suggested alongside the schema's).
    pub fn added_names(&self) -> Vec<String> {
        self.added.iter().map(|(n, _)| n.clone()).collect()
    }

    pub fn add(&mut self, field: String, kind: Kind) {
        self.added.retain(|(n, _)| !under(n, &field));
        self.added.push((field, kind));
    }

    /// An inclusion projection at stage `stage` keeping `keep` (ids
    /// included) and computing `computed`.
    pub fn keep(&mut self, stage: usize, keep: Vec<String>, computed: Vec<(String, Kind)>) {
        self.added
            .retain(|(n, _)| keep.iter().any(|k| under(n, k) || under(k, n)));
        self.views.push((stage, View::Keep(keep)));
        for (f, k) in computed {
            self.add(f, k);
        }
    }

    pub fn drop(&mut self, stage: usize, drop: Vec<String>) {
        self.added
            .retain(|(n, _)| !drop.iter().any(|d| under(n, d)));
        self.views.push((stage, View::Drop(drop)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances() {
        assert_eq!(distance("magpfs", "magpsf"), 2);
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("candidate.drb", "candidate.drb"), 0);
        assert!(under("candidate.magpsf", "candidate"));
        assert!(!under("candidatex", "candidate"));
        assert_eq!(nearest("$mtach", &["$match", "$project"]), Some("$match"));
        assert_eq!(nearest("$group", &["$match", "$project"]), None);
    }
}
