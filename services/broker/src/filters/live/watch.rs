//! The live path for versions that read beyond the candidate (`prv_candidates`,
//! `fp_hists`, a broker's own fields): each alert is evaluated on the value
//! the ingest decoded, on the decode thread, right after it was decoded
//! (issue 27 §3). Only the top-level fields the versions read become JSON,
//! and of their records only the keys read (`prv_candidates.magpsf` makes
//! each earlier detection `{"magpsf": …}`); the cutouts never do. What is
//! kept until the store commits is the matches, which are few.
//!
//! A match's saved `fields` are the version's output on the document the
//! old path built (the whole packet less its cutouts): a version whose
//! output an inclusion `$project` shapes is given the fields it reads and
//! keeps; any other is given every top-level field but the cutouts (and,
//! when it has no `$project`, the histories only as far as it reads them,
//! since its output drops them).

use super::{ActiveFilter, BatchReport, LiveFilters, NOT_IN_MATCH};
use crate::alerts::avro::{DecodedAlert, to_json};
use crate::alerts::service::{FileWatch, StoredBatch};
use crate::filters::document::{CUTOUTS, strip, without};
use crate::filters::pipeline::{CandidateNeeds, Needs};
use crate::filters::store::MatchRow;
use apache_avro::types::Value;
use ithaca_kit::clock;
use ithaca_kit::error::ServiceError;
use serde_json::{Map, Value as Json};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

/// The top-level fields whose histories an output without a `$project`
/// drops (see `NOT_IN_MATCH`).
const HISTORIES: [&str; 2] = ["prv_candidates", "fp_hists"];

/// What of each alert a set of versions reads when one reads beyond the
/// candidate: the union of their needs.
#[derive(Clone, Debug)]
pub(super) struct Plan {
    /// The candidate's keys (`programid` always among them), or all of it.
    candidate: CandidateNeeds,
    /// The top-level fields beyond the four, each with its keys.
    top: BTreeMap<String, CandidateNeeds>,
    /// The distinct withheld sets of the versions, shortest first: each
    /// alert is stripped once per set.
    views: Vec<Vec<String>>,
}

impl Plan {
    /// `None` when no version of `picked` reads beyond the candidate: the
    /// stored candidate serves them all (see `Reading`).
    pub(super) fn of(set: &[ActiveFilter], picked: &[usize]) -> Option<Plan> {
        if !picked.iter().any(|&i| set[i].pipeline.needs().packet) {
            return None;
        }
        let mut candidate = CandidateNeeds::Keys(vec!["programid".to_owned()]);
        let mut top: BTreeMap<String, CandidateNeeds> = BTreeMap::new();
        let mut views: Vec<Vec<String>> = Vec::new();
        for &i in picked {
            let needs = set[i].pipeline.needs();
            candidate.union(&needs.candidate);
            for (name, keys) in &needs.top {
                top.entry(name.clone()).or_default().union(keys);
            }
            if !views.contains(&set[i].withheld) {
                views.push(set[i].withheld.clone());
            }
        }
        views.sort_by_key(Vec::len);
        Some(Plan {
            candidate,
            top,
            views,
        })
    }

    /// Whether the plan's document holds everything `needs` reads.
    fn covers(&self, needs: &Needs) -> bool {
        self.candidate.covers(&needs.candidate)
            && needs
                .top
                .iter()
                .all(|(name, keys)| self.top.get(name).is_some_and(|mine| mine.covers(keys)))
    }
}

/// One file's watcher: the active set as it was when the file's ingest
/// began, and the matches of the alerts decoded so far.
pub struct LiveWatch {
    live: LiveFilters,
    set: Arc<Vec<ActiveFilter>>,
    picked: Vec<usize>,
    plan: Plan,
    broker_id: String,
    matches: Vec<MatchRow>,
    /// Alerts evaluated (one per decoded alert; the tests check it).
    evaluated: usize,
}

impl LiveWatch {
    pub(super) fn new(
        live: LiveFilters,
        set: Arc<Vec<ActiveFilter>>,
        picked: Vec<usize>,
        plan: Plan,
        broker_id: &str,
    ) -> LiveWatch {
        LiveWatch {
            live,
            set,
            picked,
            plan,
            broker_id: broker_id.to_owned(),
            matches: Vec::new(),
            evaluated: 0,
        }
    }

    /// How many alerts this watcher evaluated.
    pub fn evaluated(&self) -> usize {
        self.evaluated
    }

    /// Save the matches of the alerts `batch` holds (those the ingest
    /// newly stored); the others' are dropped: an alert stored before (a
    /// re-ingest under another file) matches no version again.
    pub async fn finish(self, batch: StoredBatch) -> Result<BatchReport, ServiceError> {
        let LiveWatch {
            live,
            set,
            picked,
            mut matches,
            ..
        } = self;
        let new: HashSet<i64> = batch.alerts.iter().map(|a| a.row.candid).collect();
        matches.retain(|m| new.contains(&m.candid));
        live.save(&set, &picked, &matches).await?;
        Ok(BatchReport {
            alerts: batch.alerts.len(),
            filters: picked.len(),
            matches: matches.len(),
        })
    }
}

#[tonic::async_trait]
impl FileWatch for LiveWatch {
    fn decoded(&mut self, alert: &DecodedAlert, value: &Value) {
        self.evaluated += 1;
        let parts = AlertParts {
            candid: alert.candid,
            object_id: &alert.object_id,
            schemavsn: &alert.schemavsn,
            jd: alert.jd,
            candidate: &alert.candidate,
        };
        let batch = Batch {
            set: &self.set,
            picked: &self.picked,
            plan: &self.plan,
            broker_id: &self.broker_id,
            now: clock::now_ms(),
        };
        evaluate_alert(&batch, &parts, value, &mut self.matches);
    }

    async fn stored(self: Box<Self>, batch: StoredBatch) {
        let broker_id = batch.broker_id.clone();
        match self.finish(batch).await {
            Ok(report) if report.matches > 0 => tracing::debug!(
                %broker_id,
                alerts = report.alerts,
                filters = report.filters,
                matches = report.matches,
                "filters ran on new alerts"
            ),
            Ok(_) => {}
            // The alerts are stored; their matches are what is lost.
            Err(e) => tracing::error!(
                %broker_id,
                error = %e.message,
                "filters could not save the matches of newly stored alerts"
            ),
        }
    }
}

/// The parts of an alert the live path reads besides its decoded value.
pub(super) struct AlertParts<'a> {
    pub candid: i64,
    pub object_id: &'a str,
    pub schemavsn: &'a str,
    pub jd: f64,
    /// The whole `candidate` record as JSON.
    pub candidate: &'a Json,
}

/// What every alert of one batch is evaluated against.
pub(super) struct Batch<'a> {
    pub set: &'a [ActiveFilter],
    pub picked: &'a [usize],
    pub plan: &'a Plan,
    pub broker_id: &'a str,
    pub now: i64,
}

/// Evaluate the batch's versions on one alert, adding its matches to `out`.
pub(super) fn evaluate_alert(
    batch: &Batch<'_>,
    alert: &AlertParts<'_>,
    value: &Value,
    out: &mut Vec<MatchRow>,
) {
    let Value::Record(fields) = value else {
        tracing::error!(
            candid = alert.candid,
            "decoded alert is not a record; not filtered"
        );
        return;
    };
    let plan = batch.plan;
    let mut doc = document(alert, fields, &plan.candidate, Tops::Only(&plan.top));
    let programid = alert.candidate.get("programid").and_then(Json::as_i64);
    for (k, view) in plan.views.iter().enumerate() {
        let copy;
        let seen = if view.is_empty() {
            &doc
        } else if k + 1 == plan.views.len() {
            strip(&mut doc, view);
            &doc
        } else {
            copy = without(&doc, view);
            &copy
        };
        for &i in batch.picked {
            let f = &batch.set[i];
            if f.withheld != *view
                || !programid.is_some_and(|p| f.programids.iter().any(|q| i64::from(*q) == p))
            {
                continue;
            }
            if !f.pipeline.passes(seen) {
                continue;
            }
            let input = match_input(f, plan, alert, fields, seen);
            out.push(MatchRow {
                filter_id: f.filter_id.clone(),
                candid: alert.candid,
                version: f.version,
                broker_id: batch.broker_id.to_owned(),
                object_id: alert.object_id.to_owned(),
                jd: alert.jd,
                matched_at_ms: batch.now,
                fields: match_fields(f, &input),
            });
        }
    }
}

/// The document `f`'s output is taken from for a match: the one the
/// versions decided on when it holds everything the output is built from,
/// otherwise one built for `f` (matches are few; alerts are many).
fn match_input<'a>(
    f: &ActiveFilter,
    plan: &Plan,
    alert: &AlertParts<'_>,
    fields: &[(String, Value)],
    seen: &'a Json,
) -> Cow<'a, Json> {
    let mut built = match f.pipeline.output_needs() {
        Some(needs) if plan.covers(needs) => return Cow::Borrowed(seen),
        Some(needs) => document(alert, fields, &needs.candidate, Tops::Only(&needs.top)),
        None if !f.pipeline.projects() => document(
            alert,
            fields,
            &CandidateNeeds::Whole,
            Tops::AllButHistories(&f.pipeline.needs().top),
        ),
        None => document(alert, fields, &CandidateNeeds::Whole, Tops::All),
    };
    strip(&mut built, &f.withheld);
    Cow::Owned(built)
}

/// What `f`'s pipeline output for a matched alert, as JSON text, as the
/// candidate path saves it (`super::match_fields`).
fn match_fields(f: &ActiveFilter, input: &Json) -> String {
    let Some(Json::Object(mut out)) = f.pipeline.eval(input) else {
        return "{}".to_owned();
    };
    for key in NOT_IN_MATCH {
        if !HISTORIES.contains(&key) || !f.pipeline.projects() {
            out.remove(key);
        }
    }
    serde_json::to_string(&Json::Object(out)).unwrap_or_else(|_| "{}".to_owned())
}

/// Which top-level fields beyond `objectId`, `candid`, `schemavsn` and
/// `candidate` a document holds (never the cutouts).
enum Tops<'a> {
    /// These, each with its keys.
    Only(&'a BTreeMap<String, CandidateNeeds>),
    /// Every one, but the histories only as far as these needs read them.
    AllButHistories(&'a BTreeMap<String, CandidateNeeds>),
    /// Every one.
    All,
}

/// The alert document of `alert` with the `candidate` keys and top-level
/// fields asked for, converted from the decoded `fields`.
fn document(
    alert: &AlertParts<'_>,
    fields: &[(String, Value)],
    candidate: &CandidateNeeds,
    tops: Tops<'_>,
) -> Json {
    let mut m = Map::new();
    m.insert("objectId".to_owned(), Json::from(alert.object_id));
    m.insert("candid".to_owned(), Json::from(alert.candid));
    m.insert("schemavsn".to_owned(), Json::from(alert.schemavsn));
    let cand = match (candidate, alert.candidate) {
        (CandidateNeeds::Whole, whole) => whole.clone(),
        (CandidateNeeds::Keys(keys), Json::Object(whole)) => Json::Object(
            keys.iter()
                .filter_map(|k| whole.get(k).map(|v| (k.clone(), v.clone())))
                .collect(),
        ),
        _ => Json::Object(Map::new()),
    };
    m.insert("candidate".to_owned(), cand);
    for (name, value) in fields {
        let name = name.as_str();
        if matches!(name, "objectId" | "candid" | "schemavsn" | "candidate")
            || CUTOUTS.contains(&name)
        {
            continue;
        }
        let keys = match &tops {
            Tops::Only(top) => top.get(name),
            Tops::AllButHistories(top) if HISTORIES.contains(&name) => top.get(name),
            Tops::AllButHistories(_) | Tops::All => Some(&CandidateNeeds::Whole),
        };
        if let Some(keys) = keys {
            m.insert(name.to_owned(), pruned(value, keys));
        }
    }
    Json::Object(m)
}

/// `value` as JSON, its records (through unions and arrays) cut down to
/// `keys`: what a pipeline reading `field.key` sees of `field`, with every
/// element of an array kept (so array semantics are unchanged).
fn pruned(value: &Value, keys: &CandidateNeeds) -> Json {
    match keys {
        CandidateNeeds::Keys(keys) => pruned_to(value, keys),
        CandidateNeeds::Whole | CandidateNeeds::Nothing => to_json(value),
    }
}

fn pruned_to(value: &Value, keys: &[String]) -> Json {
    match value {
        Value::Union(_, inner) => pruned_to(inner, keys),
        Value::Array(items) => Json::Array(items.iter().map(|v| pruned_to(v, keys)).collect()),
        Value::Record(fields) => Json::Object(
            fields
                .iter()
                .filter(|(k, _)| keys.contains(k))
                .map(|(k, v)| (k.clone(), to_json(v)))
                .collect(),
        ),
        Value::Map(entries) => Json::Object(
            entries
                .iter()
                .filter(|(k, _)| keys.contains(k))
                .map(|(k, v)| (k.clone(), to_json(v)))
                .collect(),
        ),
        other => to_json(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn packet() -> Value {
        let prv = |jd: f64, mag: Option<f32>| {
            Value::Record(vec![
                ("jd".to_owned(), Value::Double(jd)),
                (
                    "magpsf".to_owned(),
                    match mag {
                        Some(m) => Value::Union(1, Box::new(Value::Float(m))),
                        None => Value::Union(0, Box::new(Value::Null)),
                    },
                ),
                ("diffmaglim".to_owned(), Value::Float(20.5)),
            ])
        };
        Value::Record(vec![
            ("schemavsn".to_owned(), Value::String("4.02".into())),
            (
                "publisher".to_owned(),
                Value::String("ZTF (www.ztf.caltech.edu)".into()),
            ),
            ("objectId".to_owned(), Value::String("ZTF18aaaaaaa".into())),
            ("candid".to_owned(), Value::Long(7)),
            ("candidate".to_owned(), Value::Record(vec![])),
            (
                "prv_candidates".to_owned(),
                Value::Union(
                    1,
                    Box::new(Value::Array(vec![prv(1.0, Some(18.0)), prv(2.0, None)])),
                ),
            ),
            (
                "fp_hists".to_owned(),
                Value::Union(0, Box::new(Value::Null)),
            ),
            ("cutoutScience".to_owned(), Value::Bytes(vec![1, 2, 3])),
        ])
    }

    fn fields(value: &Value) -> &[(String, Value)] {
        match value {
            Value::Record(f) => f,
            _ => unreachable!("a record"),
        }
    }

    #[test]
    fn a_document_holds_the_fields_read_and_their_keys_only() {
        let candidate = json!({"programid": 1, "magpsf": 17.5, "drb": 0.9});
        let alert = AlertParts {
            candid: 7,
            object_id: "ZTF18aaaaaaa",
            schemavsn: "4.02",
            jd: 3.0,
            candidate: &candidate,
        };
        let packet = packet();
        let mut top = BTreeMap::new();
        top.insert(
            "prv_candidates".to_owned(),
            CandidateNeeds::Keys(vec!["magpsf".into()]),
        );
        let keys = CandidateNeeds::Keys(vec!["magpsf".into(), "programid".into()]);
        let doc = document(&alert, fields(&packet), &keys, Tops::Only(&top));
        assert_eq!(
            doc,
            json!({
                "objectId": "ZTF18aaaaaaa", "candid": 7, "schemavsn": "4.02",
                "candidate": {"programid": 1, "magpsf": 17.5},
                // Every element kept, each with only the key read.
                "prv_candidates": [{"magpsf": 18.0}, {"magpsf": null}]
            })
        );
        // Every top-level field but the cutouts; the histories as read.
        let open = document(
            &alert,
            fields(&packet),
            &CandidateNeeds::Whole,
            Tops::AllButHistories(&BTreeMap::new()),
        );
        assert_eq!(
            open,
            json!({
                "objectId": "ZTF18aaaaaaa", "candid": 7, "schemavsn": "4.02",
                "candidate": candidate,
                "publisher": "ZTF (www.ztf.caltech.edu)"
            })
        );
        let all = document(&alert, fields(&packet), &CandidateNeeds::Whole, Tops::All);
        assert_eq!(all["prv_candidates"][1]["diffmaglim"], json!(20.5));
        assert_eq!(all["fp_hists"], Json::Null);
        assert!(all.get("cutoutScience").is_none());
    }
}
