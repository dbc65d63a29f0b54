//! The live path: every alert an ingest newly stores passes through every
//! active version of every tenant's filters, in memory, and the matches are
//! saved per each filter's auto-save settings.
//!
//! The active set (compiled pipelines) is loaded once and kept: activation
//! in this process marks it stale, and it is reloaded at most
//! [`RELOAD_AFTER`] after it was loaded, so an activation on another broker
//! replica reaches this one within that bound. One ingest is one batch:
//! every relevant version is evaluated on each alert, and all the batch's
//! matches saved in one transaction (never a database round trip per alert
//! or per filter).
//!
//! Versions on the candidate read each stored alert's `candidate` JSON after
//! the store commits. When one reads beyond the candidate, the ingest hands
//! this hook each alert's decoded value as it decodes the file (a
//! [`LiveWatch`], in `watch`): the packet is decoded once, by the ingest,
//! and the matches of alerts that turn out to be stored already are
//! dropped.

mod watch;

pub use watch::LiveWatch;

use super::document::alert_document;
pub use super::document::{strip, without};
use super::model::Autosave;
use super::pipeline::scan::{KeySet, object_subset};
use super::pipeline::{self, CandidateNeeds, Pipeline};
use super::store::{FilterStore, MatchRow};
use crate::alerts::AlertService;
use crate::alerts::service::{FileWatch, IngestHook, StoredBatch};
use crate::alerts::store::NewAlert;
use apache_avro::Schema;
use ithaca_kit::clock;
use ithaca_kit::error::ServiceError;
use serde_json::Value as Json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a loaded active set is trusted before it is read again.
pub const RELOAD_AFTER: Duration = Duration::from_secs(5);

/// One active version, compiled.
pub struct ActiveFilter {
    pub filter_id: String,
    pub tenant_id: String,
    pub broker_id: String,
    pub version: i64,
    /// The `candidate.programid`s of the filter's stream.
    pub programids: Vec<i32>,
    /// The paths the stream withholds, removed from what the version sees.
    pub withheld: Vec<String>,
    pub pipeline: Pipeline,
    pub autosave: Autosave,
}

/// The active versions and the ingest hook that runs them. Cheap to clone.
#[derive(Clone)]
pub struct LiveFilters {
    inner: Arc<Inner>,
}

struct Inner {
    store: FilterStore,
    alerts: AlertService,
    /// The loaded set and when it was loaded.
    loaded: Mutex<Option<(Instant, Arc<Vec<ActiveFilter>>)>>,
    /// Set by activation here: reload before the next batch.
    stale: AtomicBool,
}

/// What one batch did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BatchReport {
    pub alerts: usize,
    pub filters: usize,
    pub matches: usize,
}

impl LiveFilters {
    pub fn new(store: FilterStore, alerts: AlertService) -> Self {
        LiveFilters {
            inner: Arc::new(Inner {
                store,
                alerts,
                loaded: Mutex::new(None),
                stale: AtomicBool::new(true),
            }),
        }
    }

    /// Reload the active set before the next batch.
    pub fn invalidate(&self) {
        self.inner.stale.store(true, Ordering::SeqCst);
    }

    /// The active set, reloaded when stale or older than [`RELOAD_AFTER`].
    pub async fn active(&self) -> Result<Arc<Vec<ActiveFilter>>, ServiceError> {
        let cached = self
            .inner
            .loaded
            .lock()
            .ok()
            .and_then(|l| l.as_ref().map(|(at, set)| (*at, set.clone())));
        if let Some((at, set)) = cached
            && !self.inner.stale.load(Ordering::SeqCst)
            && at.elapsed() < RELOAD_AFTER
        {
            return Ok(set);
        }
        // Clear the flag first: an activation during the load marks it again.
        self.inner.stale.store(false, Ordering::SeqCst);
        let set = match self.load().await {
            Ok(set) => Arc::new(set),
            Err(e) => {
                // Not loaded: the next batch tries again.
                self.inner.stale.store(true, Ordering::SeqCst);
                return Err(e);
            }
        };
        if let Ok(mut l) = self.inner.loaded.lock() {
            *l = Some((Instant::now(), set.clone()));
        }
        Ok(set)
    }

    async fn load(&self) -> Result<Vec<ActiveFilter>, ServiceError> {
        let rows = self.inner.store.active().await?;
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let streams = self.inner.store.streams().await?;
        // The survey's own schema, as versions were checked against.
        let schema = self.inner.alerts.survey_schema().await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let Some(stream) = streams.iter().find(|s| s.stream_id == row.stream_id) else {
                continue;
            };
            let json: Json = match serde_json::from_str(&row.pipeline) {
                Ok(j) => j,
                Err(e) => {
                    tracing::error!(filter_id = %row.filter_id, error = %e, "stored pipeline is not JSON");
                    continue;
                }
            };
            match pipeline::compile(&json, &schema, &stream.bounds(&schema)) {
                Ok(checked) => out.push(ActiveFilter {
                    programids: stream.programids(),
                    withheld: stream.withheld(),
                    filter_id: row.filter_id,
                    tenant_id: row.tenant_id,
                    broker_id: row.broker_id,
                    version: row.version,
                    pipeline: checked.pipeline,
                    autosave: Autosave {
                        enabled: row.autosave,
                        keep: row.autosave_keep,
                    },
                }),
                // The schema changed under an active version: it stops
                // matching rather than matching wrongly, and says so.
                Err(problems) => tracing::warn!(
                    filter_id = %row.filter_id,
                    version = row.version,
                    problems = problems.len(),
                    "active filter version no longer compiles; it does not run"
                ),
            }
        }
        Ok(out)
    }

    /// A watcher of one file's decode for `broker_id`, when a relevant
    /// active version reads beyond the candidate; `None` otherwise (the
    /// stored candidates serve, after the store) or when the active set
    /// cannot be loaded (the batch's [`Self::run`] tries again and reports).
    pub async fn watch(&self, broker_id: &str) -> Option<LiveWatch> {
        let active = self.active().await.ok()?;
        let picked = relevant(&active, broker_id);
        let plan = watch::Plan::of(&active, &picked)?;
        Some(LiveWatch::new(
            self.clone(),
            active,
            picked,
            plan,
            broker_id,
        ))
    }

    /// Run the active versions of `batch.broker_id` on the batch and save
    /// their matches.
    pub async fn run(&self, batch: StoredBatch) -> Result<BatchReport, ServiceError> {
        let active = self.active().await?;
        let relevant = relevant(&active, &batch.broker_id);
        let mut report = BatchReport {
            alerts: batch.alerts.len(),
            filters: relevant.len(),
            matches: 0,
        };
        if relevant.is_empty() || batch.alerts.is_empty() {
            return Ok(report);
        }
        let set = active.clone();
        let picked = relevant.clone();
        // Decoding and evaluation are CPU work: off the async workers.
        let matches = tokio::task::spawn_blocking(move || evaluate(&set, &picked, &batch))
            .await
            .map_err(|e| ServiceError::internal(&e))?;
        report.matches = matches.len();
        self.save(&active, &relevant, &matches).await?;
        Ok(report)
    }

    /// Save a batch's matches of the `relevant` versions of `active`, and
    /// trim each matching filter's to its auto-save limit, in one
    /// transaction.
    async fn save(
        &self,
        active: &[ActiveFilter],
        relevant: &[usize],
        matches: &[MatchRow],
    ) -> Result<(), ServiceError> {
        if matches.is_empty() {
            return Ok(());
        }
        let trims: Vec<(String, i64)> = relevant
            .iter()
            .map(|&i| &active[i])
            .filter(|f| matches.iter().any(|m| m.filter_id == f.filter_id))
            .map(|f| (f.filter_id.clone(), f.autosave.keep))
            .collect();
        self.inner.store.save_matches(matches, &trims).await?;
        Ok(())
    }
}

/// The indices of the versions of `active` that run on `broker_id`'s alerts
/// (those that save their matches).
fn relevant(active: &[ActiveFilter], broker_id: &str) -> Vec<usize> {
    active
        .iter()
        .enumerate()
        .filter(|(_, f)| f.broker_id == broker_id && f.autosave.enabled)
        .map(|(i, _)| i)
        .collect()
}

#[tonic::async_trait]
impl IngestHook for LiveFilters {
    async fn watch(&self, broker_id: &str) -> Option<Box<dyn FileWatch>> {
        let watch = LiveFilters::watch(self, broker_id).await?;
        Some(Box::new(watch))
    }

    async fn stored(&self, batch: StoredBatch) {
        let broker_id = batch.broker_id.clone();
        match self.run(batch).await {
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
                "filters could not run on newly stored alerts"
            ),
        }
    }
}

/// Every match of the `picked` filters of `set` among the batch's alerts.
/// Each alert becomes one document, built from its stored `candidate` (the
/// fields the versions read, or all of it), or, when one reads beyond the
/// candidate, from its decoded packet ([`evaluate_packets`]); a version on
/// a stream that withholds paths sees the document without them.
fn evaluate(set: &[ActiveFilter], picked: &[usize], batch: &StoredBatch) -> Vec<MatchRow> {
    let now = clock::now_ms();
    if let Some(plan) = watch::Plan::of(set, picked) {
        return evaluate_packets(set, picked, &plan, batch, now);
    }
    let read = Reading::of(picked.iter().map(|&i| &set[i]));
    // The distinct withheld sets, the empty one (if any) first: each alert
    // is stripped once per set, and the last set strips the document
    // itself rather than a copy.
    let mut views: Vec<&[String]> = Vec::new();
    for &i in picked {
        if !views.contains(&set[i].withheld.as_slice()) {
            views.push(&set[i].withheld);
        }
    }
    views.sort_by_key(|v| v.len());
    let mut out = Vec::new();
    for alert in &batch.alerts {
        let mut doc = match read.document(alert) {
            Ok(doc) => doc,
            Err(e) => {
                tracing::error!(candid = alert.row.candid, error = %e, "stored alert does not decode for filtering");
                continue;
            }
        };
        let programid = doc
            .get("candidate")
            .and_then(|c| c.get("programid"))
            .and_then(Json::as_i64);
        for (k, view) in views.iter().enumerate() {
            let copy;
            let seen = if view.is_empty() {
                &doc
            } else if k + 1 == views.len() {
                strip(&mut doc, view);
                &doc
            } else {
                copy = without(&doc, view);
                &copy
            };
            for &i in picked {
                let f = &set[i];
                if f.withheld.as_slice() != *view
                    || !programid.is_some_and(|p| f.programids.iter().any(|q| i64::from(*q) == p))
                {
                    continue;
                }
                if f.pipeline.passes(seen) {
                    let fields = match_fields(f, &read, alert, seen);
                    out.push(MatchRow {
                        filter_id: f.filter_id.clone(),
                        candid: alert.row.candid,
                        version: f.version,
                        broker_id: batch.broker_id.clone(),
                        object_id: alert.row.object_id.clone(),
                        jd: alert.row.jd,
                        matched_at_ms: now,
                        fields,
                    });
                }
            }
        }
    }
    out
}

/// [`evaluate`] when a version reads beyond the candidate and no watcher
/// saw the file decoded (the active set changed between the ingest's start
/// and its end, or a decoded file was stored directly): each stored packet
/// is decoded here, and evaluated as a watcher would have.
fn evaluate_packets(
    set: &[ActiveFilter],
    picked: &[usize],
    plan: &watch::Plan,
    batch: &StoredBatch,
    now: i64,
) -> Vec<MatchRow> {
    let each = watch::Batch {
        set,
        picked,
        plan,
        broker_id: &batch.broker_id,
        now,
    };
    let mut out = Vec::new();
    for alert in &batch.alerts {
        let r = &alert.row;
        let decoded = decode(&batch.schema, &alert.packet).and_then(|value| {
            let candidate: Json = serde_json::from_str(&r.candidate).map_err(|e| e.to_string())?;
            Ok((value, candidate))
        });
        let (value, candidate) = match decoded {
            Ok(d) => d,
            Err(e) => {
                tracing::error!(candid = r.candid, error = %e, "stored alert does not decode for filtering");
                continue;
            }
        };
        let parts = watch::AlertParts {
            candid: r.candid,
            object_id: &r.object_id,
            schemavsn: &r.schemavsn,
            jd: r.jd,
            candidate: &candidate,
        };
        watch::evaluate_alert(&each, &parts, &value, &mut out);
    }
    out
}

/// A stored packet's value, decoded with its writer schema.
fn decode(schema: &Schema, datum: &[u8]) -> Result<apache_avro::types::Value, String> {
    let mut reader = datum;
    apache_avro::from_avro_datum(schema, &mut reader, None).map_err(|e| e.to_string())
}

/// Top-level parts of an alert a match does not repeat: its ids (the
/// match has them) and its histories (read the alert's resource for them).
const NOT_IN_MATCH: [&str; 5] = [
    "candid",
    "objectId",
    "prv_candidates",
    "fp_hists",
    "schemavsn",
];

/// What `f`'s pipeline output for a matched alert, as JSON text: the
/// fields its `$project` keeps and its `$addFields` add. The document
/// `seen` holds only what the batch's versions read to decide, so unless
/// it is the whole candidate or packet, the output is taken from the whole
/// candidate (matches are few; alerts are many).
fn match_fields(f: &ActiveFilter, read: &Reading, alert: &NewAlert, seen: &Json) -> String {
    let whole;
    let input = match read {
        Reading::Keys(_) => {
            let r = &alert.row;
            let Ok(candidate) = serde_json::from_str::<Json>(&r.candidate) else {
                return "{}".to_owned();
            };
            let mut doc = alert_document(&r.object_id, r.candid, &r.schemavsn, candidate);
            strip(&mut doc, &f.withheld);
            whole = doc;
            &whole
        }
        Reading::Candidate => seen,
    };
    let Some(Json::Object(mut out)) = f.pipeline.eval(input) else {
        return "{}".to_owned();
    };
    for key in NOT_IN_MATCH {
        // A `$project` that keeps a history asked for it; an unprojected
        // output carries it only because the whole alert does.
        if key == "prv_candidates" || key == "fp_hists" {
            if !f.pipeline.projects() {
                out.remove(key);
            }
        } else {
            out.remove(key);
        }
    }
    serde_json::to_string(&Json::Object(out)).unwrap_or_else(|_| "{}".to_owned())
}

/// What of each alert a batch's versions read when none reads beyond the
/// candidate (otherwise `watch::Plan`).
enum Reading {
    /// The whole candidate record.
    Candidate,
    /// These candidate fields, `programid` among them.
    Keys(KeySet),
}

impl Reading {
    fn of<'a>(filters: impl Iterator<Item = &'a ActiveFilter>) -> Reading {
        let mut keys = vec!["programid".to_owned()];
        for f in filters {
            match &f.pipeline.needs().candidate {
                CandidateNeeds::Whole => return Reading::Candidate,
                CandidateNeeds::Keys(k) => keys.extend(k.iter().cloned()),
                CandidateNeeds::Nothing => {}
            }
        }
        Reading::Keys(KeySet::new(keys))
    }

    fn document(&self, alert: &NewAlert) -> Result<Json, String> {
        let r = &alert.row;
        let candidate = match self {
            Reading::Candidate => serde_json::from_str(&r.candidate).map_err(|e| e.to_string())?,
            Reading::Keys(keys) => {
                Json::Object(object_subset(&r.candidate, keys).map_err(|e| e.to_string())?)
            }
        };
        Ok(alert_document(
            &r.object_id,
            r.candid,
            &r.schemavsn,
            candidate,
        ))
    }
}
