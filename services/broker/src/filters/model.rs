//! The filter domain's names: ids that can only be built by parsing, the
//! sort order, the auto-save settings, the domain error codes, and the
//! canonical text and hash of a pipeline.

use ithaca_kit::error::ServiceError;
use serde_json::Value as Json;
use sha2::{Digest, Sha256};

/// Domain codes this module answers with (in the `ithaca-error` metadata).
pub mod codes {
    use ithaca_kit::error::DomainCode;

    /// A subject-scoped write outside a session opened on that filter.
    pub const SUBJECT_MISMATCH: DomainCode = DomainCode::SubjectMismatch;
    /// Activation of a version without a passing verdict.
    pub const NOT_VALIDATED: DomainCode = DomainCode::NotValidated;
    /// Activation of a version whose pipeline was not previewed on the
    /// filter's stream in the caller's session.
    pub const NOT_PREVIEWED: DomainCode = DomainCode::NotPreviewed;
    /// A pipeline that does not compile (run_broker_filter).
    pub const INVALID_PIPELINE: DomainCode = DomainCode::InvalidPipeline;
    pub const UNKNOWN_FILTER: DomainCode = DomainCode::UnknownFilter;
    pub const UNKNOWN_VERSION: DomainCode = DomainCode::UnknownVersion;
    pub const UNKNOWN_GROUP: DomainCode = DomainCode::UnknownGroup;
    pub const UNKNOWN_STREAM: DomainCode = DomainCode::UnknownStream;
    /// A stream the group may not use.
    pub const STREAM_NOT_IN_GROUP: DomainCode = DomainCode::StreamNotInGroup;
    /// A broker that cannot run filters on the stream's survey.
    pub const BROKER_CANNOT_FILTER: DomainCode = DomainCode::BrokerCannotFilter;
    /// `dateobs` names a GCN event with no position to search around (an
    /// unknown event is the GCN service's `UNKNOWN_GCN_EVENT`).
    pub const NO_LOCALISATION: DomainCode = DomainCode::NoLocalisation;
    /// The deployment's broker has no GCN events to take a region from.
    pub const EVENTS_UNAVAILABLE: DomainCode = DomainCode::EventsUnavailable;
    /// Deleting a filter whose version is active (deactivate it first).
    pub const FILTER_ACTIVE: DomainCode = DomainCode::FilterActive;
    /// A path only another producer (Fink, say) adds, in a filter on the
    /// survey's own stream.
    pub const FOREIGN_PATH: DomainCode = DomainCode::ForeignPath;
}

/// The resource of a filter.
pub fn filter_uri(filter_id: &str) -> String {
    format!("doomberg://filters/{filter_id}")
}

fn uuid_like(raw: &str) -> Option<String> {
    let t = raw.trim().to_ascii_lowercase();
    uuid::Uuid::parse_str(&t)
        .ok()
        .map(|u| u.hyphenated().to_string())
}

ithaca_kit::string_id! {
    /// A filter id: a UUID, as post_filter hands it out.
    pub struct FilterId;
    check = uuid_like;
    error = "filter_id: not a filter id (a UUID, as post_filter returns it)";
}

ithaca_kit::string_id! {
    /// A group id: a UUID, as get_filter_targets lists it.
    pub struct GroupId;
    check = uuid_like;
    error = "group_id: not a group id (a UUID, as get_filter_targets lists it)";
}

fn stream_like(raw: &str) -> Option<String> {
    let t = raw.trim().to_ascii_lowercase();
    let ok = !t.is_empty()
        && t.len() <= 64
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    ok.then_some(t)
}

ithaca_kit::string_id! {
    /// A stream id (`ztf-public`, `ztf-partnership`).
    pub struct StreamId;
    check = stream_like;
    error = "stream_id: not a stream id (get_filter_targets lists them, for example ztf-public)";
}

ithaca_kit::text_enum! {
    /// The order run_broker_filter returns alerts in.
    pub enum SortOrder {
        Ascending = "Ascending",
        Descending = "Descending",
    }
}

impl SortOrder {
    /// `Ascending`/`Descending`, case-insensitively (also `asc`/`desc`);
    /// `Descending` when absent.
    pub fn parse_arg(raw: Option<&str>) -> Result<SortOrder, ServiceError> {
        let Some(raw) = raw.map(str::trim).filter(|r| !r.is_empty()) else {
            return Ok(SortOrder::Descending);
        };
        match raw.to_ascii_lowercase().as_str() {
            "ascending" | "asc" => Ok(SortOrder::Ascending),
            "descending" | "desc" => Ok(SortOrder::Descending),
            _ => Err(ServiceError::invalid(format!(
                "sort_order: {raw:?} is not Ascending or Descending"
            ))),
        }
    }
}

/// Whether an active version's matches are saved, and how many are kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Autosave {
    pub enabled: bool,
    /// The newest this many matches are kept.
    pub keep: i64,
}

impl Autosave {
    pub const DEFAULT_KEEP: i64 = 1000;
    pub const MAX_KEEP: i64 = 100_000;

    /// The settings post_filter asked for, defaults filled in.
    pub fn parse(enabled: Option<bool>, keep: Option<i32>) -> Result<Autosave, ServiceError> {
        let keep = match keep {
            None => Self::DEFAULT_KEEP,
            Some(k) if !(1..=Self::MAX_KEEP).contains(&i64::from(k)) => {
                return Err(ServiceError::invalid(format!(
                    "autosave_keep: 1 to {} (got {k})",
                    Self::MAX_KEEP
                )));
            }
            Some(k) => i64::from(k),
        };
        Ok(Autosave {
            enabled: enabled.unwrap_or(true),
            keep,
        })
    }
}

/// A problem or warning about a pipeline, as stored with a verdict and
/// returned on the wire.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Finding {
    /// Where: a stage and a path.
    pub location: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suggestion: Option<String>,
}

impl From<&super::pipeline::Problem> for Finding {
    fn from(p: &super::pipeline::Problem) -> Self {
        Finding {
            location: p.location.clone(),
            message: p.message.clone(),
            suggestion: p.suggestion.clone(),
        }
    }
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.location, self.message)?;
        if let Some(s) = &self.suggestion {
            write!(f, " ({s})")?;
        }
        Ok(())
    }
}

/// A filter or group name: 1-100 characters, no control characters.
pub fn parse_name(field: &str, raw: &str, max: usize) -> Result<String, ServiceError> {
    let t = raw.trim();
    if t.is_empty() || t.chars().count() > max || t.chars().any(char::is_control) {
        return Err(ServiceError::invalid(format!(
            "{field}: 1 to {max} characters without control characters"
        )));
    }
    Ok(t.to_owned())
}

/// A version number: 1 or more.
pub fn parse_version(field: &str, raw: i32) -> Result<i64, ServiceError> {
    if raw < 1 {
        return Err(ServiceError::invalid(format!(
            "{field}: versions are numbered from 1 (got {raw})"
        )));
    }
    Ok(i64::from(raw))
}

/// JSON with every object's keys sorted, compact: the one text a pipeline
/// is hashed and stored as, whatever order its keys came in.
pub fn canonical_text(value: &Json) -> String {
    sorted(value).to_string()
}

/// The same, pretty-printed (for diffs).
pub fn pretty_text(value: &Json) -> String {
    serde_json::to_string_pretty(&sorted(value)).unwrap_or_default()
}

/// SHA-256 of [`canonical_text`], hex.
pub fn pipeline_hash(value: &Json) -> String {
    hex::encode(Sha256::digest(canonical_text(value).as_bytes()))
}

/// A copy of `value` whose objects are rebuilt in sorted key order. The
/// serialisation of a `serde_json::Map` follows insertion order when
/// `preserve_order` is on somewhere in the build, so sorting is explicit.
fn sorted(value: &Json) -> Json {
    match value {
        Json::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let mut out = serde_json::Map::new();
            for k in keys {
                out.insert(k.clone(), sorted(&map[k]));
            }
            Json::Object(out)
        }
        Json::Array(items) => Json::Array(items.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_hash_ignores_key_order() {
        let a = json!([{"$match": {"a": 1, "b": {"$gt": 2, "$lt": 5}}}]);
        let b = json!([{"$match": {"b": {"$lt": 5, "$gt": 2}, "a": 1}}]);
        assert_eq!(pipeline_hash(&a), pipeline_hash(&b));
        assert_ne!(pipeline_hash(&a), pipeline_hash(&json!([])));
    }

    #[test]
    fn ids_and_settings_parse() {
        assert!(FilterId::parse("nope").is_err());
        let id = FilterId::parse(" 6F1C2A52-8A57-4B8B-9C5C-0A4B5E0F1D2E ").expect("uuid");
        assert_eq!(id.as_str(), "6f1c2a52-8a57-4b8b-9c5c-0a4b5e0f1d2e");
        assert!(StreamId::parse("ztf public").is_err());
        assert_eq!(
            SortOrder::parse_arg(Some("asc")).ok(),
            Some(SortOrder::Ascending)
        );
        assert!(SortOrder::parse_arg(Some("sideways")).is_err());
        assert_eq!(
            Autosave::parse(None, None).ok(),
            Some(Autosave {
                enabled: true,
                keep: 1000
            })
        );
        assert!(Autosave::parse(None, Some(0)).is_err());
        assert!(parse_version("version", 0).is_err());
    }
}
