//! The alert schema as dotted paths: the flattening the broker owns.
//!
//! `get_alert_schema` answers with it, and filter validation (the next
//! issue) checks a pipeline's field references against the same function,
//! so an agent and the validator can never disagree about what a path is.
//!
//! A path names a leaf or a record field from the top of the alert:
//! `candidate.magpsf`, `prv_candidates?[].magpsf?`. A `?` follows a field
//! whose value may be null (an Avro union with `null`); `[]` follows an
//! array. [`FlatField::field`] is the same path without markers, the way a
//! filter pipeline writes it.

use apache_avro::Schema;
use apache_avro::schema::{RecordSchema, UnionSchema};
use std::collections::{BTreeMap, HashMap};

/// One path of a flattened schema.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FlatField {
    /// With markers: `prv_candidates?[].magpsf?`.
    pub path: String,
    /// Without markers: `prv_candidates.magpsf`.
    pub field: String,
    /// The Avro type of the value (of the elements, for arrays of
    /// primitives the type is `array<double>`): `double`, `string`, `record`…
    pub avro_type: String,
    pub nullable: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub doc: Option<String>,
}

/// Flatten `schema` (a record) to paths, parents before children, in field
/// order. `known` resolves named references to types defined elsewhere
/// (the other `.avsc` files); types defined inside `schema` are found on
/// the way.
pub fn flatten(schema: &Schema, known: &[Schema]) -> Vec<FlatField> {
    let mut names: HashMap<String, &Schema> = HashMap::new();
    for s in known {
        collect_names(s, &mut names);
    }
    collect_names(schema, &mut names);
    let mut out = Vec::new();
    if let Some(record) = as_record(schema, &names) {
        walk_record(record, "", "", &names, &mut out, 0);
    }
    out
}

/// Flattened paths of several schema versions, merged: each path once, with
/// the versions that have it, in first-seen order.
pub fn union<'a>(
    versions: impl IntoIterator<Item = (&'a str, &'a [FlatField])>,
) -> Vec<(FlatField, Vec<String>)> {
    let mut order: Vec<String> = Vec::new();
    let mut merged: BTreeMap<String, (FlatField, Vec<String>)> = BTreeMap::new();
    for (version, fields) in versions {
        for f in fields {
            match merged.get_mut(&f.path) {
                Some((known, have)) => {
                    if !have.iter().any(|v| v == version) {
                        have.push(version.to_owned());
                    }
                    if known.doc.is_none() {
                        known.doc.clone_from(&f.doc);
                    }
                }
                None => {
                    order.push(f.path.clone());
                    merged.insert(f.path.clone(), (f.clone(), vec![version.to_owned()]));
                }
            }
        }
    }
    order
        .into_iter()
        .filter_map(|p| merged.remove(&p))
        .collect()
}

fn collect_names<'a>(schema: &'a Schema, names: &mut HashMap<String, &'a Schema>) {
    match schema {
        Schema::Record(r) => {
            names.insert(r.name.fullname(None), schema);
            for f in &r.fields {
                collect_names(&f.schema, names);
            }
        }
        Schema::Enum(e) => {
            names.insert(e.name.fullname(None), schema);
        }
        Schema::Fixed(f) => {
            names.insert(f.name.fullname(None), schema);
        }
        Schema::Array(a) => collect_names(&a.items, names),
        Schema::Map(m) => collect_names(&m.types, names),
        Schema::Union(u) => {
            for v in u.variants() {
                collect_names(v, names);
            }
        }
        _ => {}
    }
}

fn resolve<'a>(schema: &'a Schema, names: &HashMap<String, &'a Schema>) -> &'a Schema {
    match schema {
        Schema::Ref { name } => names.get(&name.fullname(None)).copied().unwrap_or(schema),
        other => other,
    }
}

fn as_record<'a>(
    schema: &'a Schema,
    names: &HashMap<String, &'a Schema>,
) -> Option<&'a RecordSchema> {
    match resolve(schema, names) {
        Schema::Record(r) => Some(r),
        _ => None,
    }
}

/// The non-null branch of a `[null, T]` union, and whether null was there.
fn strip_null(u: &UnionSchema) -> (Option<&Schema>, bool) {
    let nullable = u.variants().iter().any(|v| matches!(v, Schema::Null));
    let others: Vec<&Schema> = u
        .variants()
        .iter()
        .filter(|v| !matches!(v, Schema::Null))
        .collect();
    match others.as_slice() {
        [one] => (Some(one), nullable),
        _ => (None, nullable),
    }
}

/// Deep enough for any alert schema; a guard against self-referencing types.
const MAX_DEPTH: usize = 12;

fn walk_record(
    record: &RecordSchema,
    path: &str,
    field: &str,
    names: &HashMap<String, &Schema>,
    out: &mut Vec<FlatField>,
    depth: usize,
) {
    if depth > MAX_DEPTH {
        return;
    }
    for f in &record.fields {
        let join = |base: &str, name: &str| {
            if base.is_empty() {
                name.to_owned()
            } else {
                format!("{base}.{name}")
            }
        };
        let mut p = join(path, &f.name);
        let plain = join(field, &f.name);
        let mut schema = resolve(&f.schema, names);
        let mut nullable = false;
        if let Schema::Union(u) = schema {
            let (inner, has_null) = strip_null(u);
            nullable = has_null;
            match inner {
                Some(inner) => schema = resolve(inner, names),
                None => {
                    if nullable {
                        p.push('?');
                    }
                    out.push(FlatField {
                        path: p,
                        field: plain,
                        avro_type: type_name(schema, names),
                        nullable,
                        doc: f.doc.clone(),
                    });
                    continue;
                }
            }
        }
        if nullable {
            p.push('?');
        }
        match schema {
            Schema::Record(r) => {
                out.push(FlatField {
                    path: p.clone(),
                    field: plain.clone(),
                    avro_type: "record".to_owned(),
                    nullable,
                    doc: f.doc.clone(),
                });
                walk_record(r, &p, &plain, names, out, depth + 1);
            }
            Schema::Array(a) => {
                let items = resolve(&a.items, names);
                let element = match items {
                    Schema::Union(u) => strip_null(u).0.map_or(items, |s| resolve(s, names)),
                    other => other,
                };
                out.push(FlatField {
                    path: format!("{p}[]"),
                    field: plain.clone(),
                    avro_type: format!("array<{}>", type_name(element, names)),
                    nullable,
                    doc: f.doc.clone(),
                });
                if let Schema::Record(r) = element {
                    walk_record(r, &format!("{p}[]"), &plain, names, out, depth + 1);
                }
            }
            other => out.push(FlatField {
                path: p,
                field: plain,
                avro_type: type_name(other, names),
                nullable,
                doc: f.doc.clone(),
            }),
        }
    }
}

fn type_name(schema: &Schema, names: &HashMap<String, &Schema>) -> String {
    match resolve(schema, names) {
        Schema::Null => "null".into(),
        Schema::Boolean => "boolean".into(),
        Schema::Int => "int".into(),
        Schema::Long => "long".into(),
        Schema::Float => "float".into(),
        Schema::Double => "double".into(),
        Schema::Bytes => "bytes".into(),
        Schema::String | Schema::Uuid => "string".into(),
        Schema::Record(_) => "record".into(),
        Schema::Enum(_) => "enum".into(),
        Schema::Fixed(_) => "fixed".into(),
        Schema::Array(a) => format!("array<{}>", type_name(&a.items, names)),
        Schema::Map(m) => format!("map<{}>", type_name(&m.types, names)),
        Schema::Union(u) => u
            .variants()
            .iter()
            .map(|v| type_name(v, names))
            .collect::<Vec<_>>()
            .join("|"),
        Schema::Ref { name } => name.fullname(None),
        other => format!("{other:?}").to_ascii_lowercase(),
    }
}

/// The ZTF schema files of one version, in the order they must be
/// registered (cutout, candidate, prv_candidate, fp_hist, alert).
pub const SCHEMA_FILES: [&str; 5] = [
    "cutout.avsc",
    "candidate.avsc",
    "prv_candidate.avsc",
    "fp_hist.avsc",
    "alert.avsc",
];

/// Flatten the `.avsc` files of one version read from `dir` (the fallback
/// when nothing has been ingested): the alert schema with the others as
/// known types. Returns the version (the alert schema's `version`
/// attribute, else the folder name) and its paths.
pub fn flatten_files(dir: &std::path::Path) -> Result<(String, Vec<FlatField>), String> {
    let mut texts = Vec::new();
    for name in SCHEMA_FILES {
        let path = dir.join(name);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        texts.push(text);
    }
    let schemas = Schema::parse_list(texts.iter().map(String::as_str))
        .map_err(|e| format!("parsing the schema files in {}: {e}", dir.display()))?;
    let Some((alert, known)) = schemas.split_last() else {
        return Err("no schema files".to_owned());
    };
    let version = match alert {
        Schema::Record(r) => r
            .attributes
            .get("version")
            .and_then(|v| v.as_str())
            .map(str::to_owned),
        _ => None,
    }
    .or_else(|| {
        dir.file_name()
            .map(|n| n.to_string_lossy().trim_start_matches('v').to_owned())
    })
    .unwrap_or_default();
    Ok((version, flatten(alert, known)))
}

/// One schema as `get_alert_schema` answers it: where it came from, its
/// version labels, its paths (each with the versions that have it), and
/// the producers that add fields of their own.
pub struct SchemaOf {
    pub source: &'static str,
    pub versions: Vec<String>,
    pub paths: Vec<(FlatField, Vec<String>)>,
    pub producers: Vec<String>,
}

/// `text` lower-cased without `-`, `_` and spaces, so that `real-bogus`,
/// `RealBogus` and `real bogus` compare equal.
pub fn squash(text: &str) -> String {
    text.chars()
        .filter(|c| !matches!(c, '-' | '_' | ' '))
        .flat_map(char::to_lowercase)
        .collect()
}
