//! Reading alert packets with the Apache Avro crate: an object-container
//! file decoded with the writer schema it carries (one or many alerts), a
//! stored packet decoded again with its schema, and Avro values as JSON.
//!
//! A file is other people's bytes: its framing, schema and every datum pass
//! [`super::container`]'s limits before the crate decodes anything, and it
//! is decoded on a thread of its own whose stack is sized for the deepest
//! schema accepted ([`decode_file_on_thread`]).

use super::container::{self, WalkError};
pub use super::limits::DecodeError;
use super::service::FileWatch;
use super::walk;
use apache_avro::Schema;
use apache_avro::schema::ResolvedSchema;
use apache_avro::types::Value;
/// A decoded Avro value, as [`FileWatch::decoded`] gets it (named here so a
/// watcher need not depend on the Avro crate itself).
pub use apache_avro::types::Value as AvroValue;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value as Json};
use sha2::{Digest, Sha256};

/// One alert of a container, ready to store.
#[derive(Clone, Debug)]
pub struct DecodedAlert {
    pub candid: i64,
    pub object_id: String,
    pub schemavsn: String,
    /// The `candidate` record as JSON.
    pub candidate: Json,
    pub jd: f64,
    pub fid: i64,
    pub ra: f64,
    pub dec: f64,
    pub magpsf: Option<f64>,
    pub prv_detections: i64,
    pub prv_upper_limits: i64,
    /// `None` when the schema has no `fp_hists` (before 4.0) or it is null.
    pub fp_hists: Option<i64>,
    /// The alert's Avro datum exactly as the container held it (of the
    /// writer schema): stored as it came, never re-encoded.
    pub datum: Vec<u8>,
}

/// A decoded container: its writer schema and its alerts, in file order.
#[derive(Clone, Debug)]
pub struct DecodedFile {
    pub schema: Schema,
    /// SHA-256 (hex) of the version label and the schema's canonical form:
    /// the canonical form leaves out the `version` attribute and the docs,
    /// so 4.01 and 4.02 containers can share one, and each version must
    /// still be listed.
    pub schema_id: String,
    /// `4.02`, or `4.02/Fink` when the publisher is not ZTF.
    pub version: String,
    pub alerts: Vec<DecodedAlert>,
}

/// [`decode_file`] on a thread of its own with a
/// [`container::DECODE_STACK_BYTES`] stack: the decoder recurses once per
/// nesting level, and a pool thread's stack is whatever the runtime chose.
pub async fn decode_file_on_thread(bytes: Vec<u8>) -> Result<DecodedFile, DecodeError> {
    decode_watched_on_thread(bytes, None)
        .await
        .map(|(file, _)| file)
}

/// [`decode_file_watched`] on a thread of its own, as
/// [`decode_file_on_thread`], with a file's watcher (if any), which comes
/// back with the file.
pub async fn decode_watched_on_thread(
    bytes: Vec<u8>,
    mut watch: Option<Box<dyn FileWatch>>,
) -> Result<(DecodedFile, Option<Box<dyn FileWatch>>), DecodeError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("avro-decode".to_owned())
        .stack_size(container::DECODE_STACK_BYTES)
        .spawn(move || {
            let decoded = match watch.as_mut() {
                Some(w) => decode_file_watched(&bytes, &mut |a, v| w.decoded(a, v)),
                None => decode_file(&bytes),
            };
            // The receiver is gone only when the caller gave up; nothing to tell.
            let _ = tx.send(decoded.map(|file| (file, watch)));
        })
        .map_err(|e| DecodeError::Thread(e.to_string()))?;
    rx.await
        .map_err(|_| DecodeError::Thread("it stopped before answering".to_owned()))?
}

/// Decode every alert of a container file with its writer schema.
pub fn decode_file(bytes: &[u8]) -> Result<DecodedFile, DecodeError> {
    decode_file_watched(bytes, &mut |_, _| {})
}

/// [`decode_file`], handing each alert and its decoded value to `watch`
/// right after the alert is decoded, before the value is dropped: the one
/// decode of the packet at ingest is also the filters' (issue 27 §3). Only
/// one alert's value is alive at a time; `watch` must not keep it whole.
pub fn decode_file_watched(
    bytes: &[u8],
    watch: &mut dyn FnMut(&DecodedAlert, &Value),
) -> Result<DecodedFile, DecodeError> {
    container::limit_allocations();
    let header = container::read_header(bytes)?;
    let schema = header.schema.clone();
    let resolved =
        ResolvedSchema::try_from(&schema).map_err(|e| DecodeError::NotAvro(e.to_string()))?;
    let mut walk = walk::Walk::new(resolved.get_names());
    let mut candidate_left = container::MAX_FILE_CANDIDATE_VALUES;
    let mut alerts = Vec::new();
    let mut version = String::new();
    for block in header.blocks() {
        let block = block?;
        let mut data: &[u8] = &block.data;
        for _ in 0..block.records {
            let index = alerts.len();
            let (value, datum) = decode_datum(&schema, &mut walk, &mut data, index)?;
            // The candidate is what an alert keeps decoded (as JSON).
            let kept = candidate_values(&value);
            if kept > candidate_left {
                return Err(DecodeError::Refused(format!(
                    "alert {index}: the file's candidate records hold more than the limit of {} values",
                    container::MAX_FILE_CANDIDATE_VALUES
                )));
            }
            candidate_left -= kept;
            let (alert, label) = extract(&value, datum)
                .map_err(|reason| DecodeError::NotAnAlert { index, reason })?;
            if version.is_empty() {
                version = label;
            }
            watch(&alert, &value);
            alerts.push(alert);
        }
        if !data.is_empty() {
            return Err(DecodeError::Record {
                index: alerts.len(),
                reason: format!("{} bytes follow the last record of a block", data.len()),
            });
        }
    }
    if alerts.is_empty() {
        return Err(DecodeError::Empty);
    }
    let mut hasher = Sha256::new();
    hasher.update(version.as_bytes());
    hasher.update(b"\n");
    hasher.update(schema.canonical_form().as_bytes());
    let schema_id = hex::encode(hasher.finalize());
    Ok(DecodedFile {
        schema,
        schema_id,
        version,
        alerts,
    })
}

/// Walk the datum at the start of `data` within the limits, then decode
/// exactly the bytes the walk spanned: the value, and those bytes (the
/// datum as it came, which is what the archive stores).
fn decode_datum<'a>(
    schema: &Schema,
    walk: &mut walk::Walk<'_, '_>,
    data: &mut &'a [u8],
    index: usize,
) -> Result<(Value, &'a [u8]), DecodeError> {
    let start = *data;
    walk.datum(schema, data).map_err(|e| match e {
        WalkError::Limit(reason) => DecodeError::Refused(format!("alert {index}: {reason}")),
        WalkError::Corrupt(reason) => DecodeError::Record { index, reason },
    })?;
    let raw = &start[..start.len() - data.len()];
    let mut datum = raw;
    let spanned = datum.len();
    let value = apache_avro::from_avro_datum(schema, &mut datum, None).map_err(|e| {
        DecodeError::Record {
            index,
            reason: e.to_string(),
        }
    })?;
    if !datum.is_empty() {
        // The walk reads as the decoder does; a difference is a bug here.
        return Err(DecodeError::Record {
            index,
            reason: format!(
                "the decoder and the limits walk disagree: {} of {spanned} bytes read",
                spanned - datum.len()
            ),
        });
    }
    Ok((value, raw))
}

/// How many values the alert's `candidate` record holds, itself included.
fn candidate_values(alert: &Value) -> usize {
    fn count(v: &Value) -> usize {
        1 + match v {
            Value::Union(_, inner) => count(inner),
            Value::Array(items) => items.iter().map(count).sum(),
            Value::Map(m) => m.values().map(count).sum(),
            Value::Record(fields) => fields.iter().map(|(_, v)| count(v)).sum(),
            _ => 0,
        }
    }
    match alert {
        Value::Record(fields) => field(fields, "candidate").map_or(0, count),
        _ => 0,
    }
}

/// Decode a stored packet with its writer schema, as JSON (bytes as base64).
pub fn decode_packet(schema: &Schema, datum: &[u8]) -> Result<Json, String> {
    let mut reader = datum;
    let value =
        apache_avro::from_avro_datum(schema, &mut reader, None).map_err(|e| e.to_string())?;
    Ok(to_json(&value))
}

/// An Avro value as JSON: unions unwrapped, bytes as base64 text, non-finite
/// floats as null.
pub fn to_json(value: &Value) -> Json {
    match value {
        Value::Null => Json::Null,
        Value::Boolean(b) => Json::Bool(*b),
        Value::Int(i) | Value::Date(i) | Value::TimeMillis(i) => Json::from(*i),
        Value::Long(l)
        | Value::TimeMicros(l)
        | Value::TimestampMillis(l)
        | Value::TimestampMicros(l)
        | Value::TimestampNanos(l)
        | Value::LocalTimestampMillis(l)
        | Value::LocalTimestampMicros(l)
        | Value::LocalTimestampNanos(l) => Json::from(*l),
        Value::Float(f) => number(f64::from(*f)),
        Value::Double(d) => number(*d),
        Value::Bytes(b) | Value::Fixed(_, b) => Json::String(STANDARD.encode(b)),
        Value::String(s) | Value::Enum(_, s) => Json::String(s.clone()),
        Value::Uuid(u) => Json::String(u.to_string()),
        Value::Union(_, inner) => to_json(inner),
        Value::Array(items) => Json::Array(items.iter().map(to_json).collect()),
        Value::Map(m) => Json::Object(m.iter().map(|(k, v)| (k.clone(), to_json(v))).collect()),
        Value::Record(fields) => record_json(fields),
        other => Json::String(format!("{other:?}")),
    }
}

/// A record's fields as a JSON object (what [`to_json`] makes of a record,
/// without cloning the record first).
fn record_json(fields: &[(String, Value)]) -> Json {
    let mut map = Map::with_capacity(fields.len());
    for (k, v) in fields {
        map.insert(k.clone(), to_json(v));
    }
    Json::Object(map)
}

fn number(f: f64) -> Json {
    serde_json::Number::from_f64(f).map_or(Json::Null, Json::Number)
}

fn unwrap_union(value: &Value) -> &Value {
    match value {
        Value::Union(_, inner) => unwrap_union(inner),
        other => other,
    }
}

fn field<'a>(fields: &'a [(String, Value)], name: &str) -> Option<&'a Value> {
    fields
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| unwrap_union(v))
}

fn as_f64(value: Option<&Value>) -> Option<f64> {
    match value? {
        Value::Double(d) => Some(*d),
        Value::Float(f) => Some(f64::from(*f)),
        Value::Int(i) => Some(f64::from(*i)),
        Value::Long(l) => Some(*l as f64),
        _ => None,
    }
}

fn as_i64(value: Option<&Value>) -> Option<i64> {
    match value? {
        Value::Int(i) => Some(i64::from(*i)),
        Value::Long(l) => Some(*l),
        _ => None,
    }
}

fn as_str(value: Option<&Value>) -> Option<&str> {
    match value? {
        Value::String(s) => Some(s),
        _ => None,
    }
}

/// The stored form of one alert, and its schema version label. `datum` is
/// the alert's bytes as the container held them: the walk and the decoder
/// both spanned exactly these, so they decode again to `value` with the
/// writer schema, and storing them saves re-encoding (and validating) every
/// alert, which was most of a whole packet's ingest.
fn extract(value: &Value, datum: &[u8]) -> Result<(DecodedAlert, String), String> {
    let Value::Record(fields) = value else {
        return Err("the top-level value is not a record".to_owned());
    };
    let object_id = as_str(field(fields, "objectId"))
        .ok_or("no objectId")?
        .to_owned();
    let Some(Value::Record(candidate)) = field(fields, "candidate") else {
        return Err("no candidate record".to_owned());
    };
    let candid = as_i64(field(fields, "candid"))
        .or_else(|| as_i64(field(candidate, "candid")))
        .ok_or("no candid")?;
    let need = |name: &str| {
        as_f64(field(candidate, name)).ok_or_else(|| format!("candidate.{name} is missing"))
    };
    let (jd, ra, dec) = (need("jd")?, need("ra")?, need("dec")?);
    let fid = as_i64(field(candidate, "fid")).ok_or("candidate.fid is missing")?;
    let schemavsn = as_str(field(fields, "schemavsn")).unwrap_or("").to_owned();
    let publisher = as_str(field(fields, "publisher")).unwrap_or("");
    let label = if publisher.is_empty() || publisher.starts_with("ZTF") {
        schemavsn.clone()
    } else {
        format!("{schemavsn}/{publisher}")
    };
    let (mut prv_detections, mut prv_upper_limits) = (0, 0);
    if let Some(Value::Array(prv)) = field(fields, "prv_candidates") {
        for p in prv {
            if let Value::Record(p) = unwrap_union(p) {
                if as_f64(field(p, "magpsf")).is_some() {
                    prv_detections += 1;
                } else {
                    prv_upper_limits += 1;
                }
            }
        }
    }
    let fp_hists = match field(fields, "fp_hists") {
        Some(Value::Array(fp)) => Some(fp.len() as i64),
        _ => None,
    };
    let candidate_json = record_json(candidate);
    let magpsf = as_f64(field(candidate, "magpsf"));
    Ok((
        DecodedAlert {
            candid,
            object_id,
            schemavsn,
            candidate: candidate_json,
            jd,
            fid,
            ra,
            dec,
            magpsf,
            prv_detections,
            prv_upper_limits,
            fp_hists,
            datum: datum.to_vec(),
        },
        label,
    ))
}
