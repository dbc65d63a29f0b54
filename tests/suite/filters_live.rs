//! The live filters on the decode (issue 27 §3), on SQLite and PostgreSQL,
//! with the real ZTF alerts of `../shared/data`: versions that read the
//! history are evaluated on the value the ingest decoded, each alert handed
//! to the watcher exactly once, and the stored packets are never decoded
//! again (the test blanks them before the filters see the batch). The
//! matches and their saved fields are those of the old path, which decoded
//! each stored packet whole (less its cutouts): computed here from the
//! stored packets, the old way. An alert stored before, ingested again in
//! a file of other bytes, is evaluated and matches nothing new.

use crate::common;

use common::astro;
use ithaca_broker::alerts::AlertService;
use ithaca_broker::alerts::avro::{AvroValue, DecodedAlert};
use ithaca_broker::alerts::service::{FileWatch, IngestHook, StoredBatch};
use ithaca_broker::filters::live::{LiveFilters, LiveWatch, strip};
use ithaca_broker::filters::pipeline;
use ithaca_broker::filters::preview::packet_document;
use ithaca_broker::filters::run::RunArgs;
use ithaca_broker::filters::service::{FilterService, NewFilter};
use ithaca_broker::filters::store::FilterStore;
use ithaca_kit::principal::Principal;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

macro_rules! on_both_databases {
    ($($behaviour:ident),+ $(,)?) => {$(
        mod $behaviour {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                let dir = tempfile::tempdir().expect("tempdir");
                let url = crate::common::sqlite_path(&dir, "broker");
                let db = ithaca_broker::open_db(&url, "unused").await.expect("db");
                super::$behaviour(db).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                let Some(url) = crate::common::postgres(module_path!()) else {
                    return;
                };
                let schema = crate::common::unique_schema("filters_live");
                let db = ithaca_broker::open_db(&url, &schema).await.expect("db");
                super::$behaviour(db.clone()).await;
                db.close().await;
                crate::common::drop_schema(&url, &schema).await;
            }
        }
    )+};
}

on_both_databases!(history_versions_run_on_the_ingests_decode);

/// How many times the watchers saw each candid decoded.
type Seen = Arc<Mutex<HashMap<i64, usize>>>;

/// The broker's live filters as the ingest hook, counting what the
/// watchers see and blanking the stored packets before the filters get the
/// batch: a filter that decoded a stored packet again would fail on it.
struct Counting {
    live: LiveFilters,
    seen: Seen,
    /// Files the hook was asked to watch, and batches it got unwatched.
    watched: Mutex<(usize, usize)>,
}

struct CountingWatch {
    inner: LiveWatch,
    seen: Seen,
}

#[tonic::async_trait]
impl FileWatch for CountingWatch {
    fn decoded(&mut self, alert: &DecodedAlert, value: &AvroValue) {
        *self
            .seen
            .lock()
            .expect("seen")
            .entry(alert.candid)
            .or_default() += 1;
        let before = self.inner.evaluated();
        self.inner.decoded(alert, value);
        assert_eq!(self.inner.evaluated(), before + 1);
    }

    async fn stored(self: Box<Self>, mut batch: StoredBatch) {
        for alert in &mut batch.alerts {
            alert.packet = Vec::new();
        }
        self.inner.finish(batch).await.expect("matches saved");
    }
}

#[tonic::async_trait]
impl IngestHook for Counting {
    async fn watch(&self, broker_id: &str) -> Option<Box<dyn FileWatch>> {
        let inner = self.live.watch(broker_id).await?;
        self.watched.lock().expect("watched").0 += 1;
        Some(Box::new(CountingWatch {
            inner,
            seen: self.seen.clone(),
        }))
    }

    async fn stored(&self, batch: StoredBatch) {
        self.watched.lock().expect("watched").1 += 1;
        self.live.run(batch).await.expect("filters ran");
    }
}

/// The versions: what they read, and the stream they run on.
fn versions() -> Vec<(&'static str, &'static str, Value)> {
    vec![
        // The bench's history version: no $project, so its output is the
        // whole alert less ids and histories.
        (
            "history",
            "ztf-public",
            json!([{"$match": {
                "candidate.drb": {"$gte": 0.5},
                "prv_candidates.magpsf": {"$lt": 19.0}
            }}]),
        ),
        // An inclusion $project that keeps a history's key.
        (
            "history kept",
            "ztf-partnership",
            json!([
                {"$match": {"prv_candidates.magpsf": {"$lt": 19.5}}},
                {"$project": {"candidate.magpsf": 1, "prv_candidates.magpsf": 1, "prv_candidates.jd": 1}}
            ]),
        ),
        // An exclusion $project: every field but the dropped one passes.
        (
            "forced photometry, all but candidate",
            "ztf-partnership",
            json!([
                {"$match": {"fp_hists": {"$exists": true}}},
                {"$project": {"candidate": 0}}
            ]),
        ),
        // Versions on the candidate, in the same batch.
        (
            "bright",
            "ztf-public",
            json!([{"$match": {"candidate.magpsf": {"$lt": 18.5}}}]),
        ),
        (
            "defaults",
            "ztf-partnership",
            json!([
                {"$match": {"candidate.drb": {"$gt": 0.5}, "candidate.isdiffpos": {"$in": ["t", "1"]}}},
                {"$addFields": {"age_days": {"$subtract": ["$candidate.jd", "$candidate.jdstarthist"]}}},
                {"$project": {"candidate.jd": 1, "candidate.magpsf": 1, "age_days": 1}}
            ]),
        ),
    ]
}

async fn activate(service: &FilterService, who: &Principal, filter_id: &str, pipeline: &Value) {
    let verdict = service
        .post_version(who, filter_id, pipeline)
        .await
        .unwrap_or_else(|e| panic!("post_version: {}", e.message));
    assert!(verdict.passed, "{pipeline}: {:?}", verdict.problems);
    service
        .run(
            who,
            RunArgs {
                pipeline: pipeline.clone(),
                filter_id: Some(filter_id.to_owned()),
                ..Default::default()
            },
        )
        .await
        .unwrap_or_else(|e| panic!("preview: {}", e.message));
    service
        .activate(
            who,
            filter_id,
            i32::try_from(verdict.version).expect("version"),
            false,
        )
        .await
        .unwrap_or_else(|e| panic!("activate: {}", e.message));
}

/// The matches (candid → saved fields) of a version as the old path made
/// them: each stored packet decoded whole, its cutouts left out, the
/// stream's withheld paths stripped, and the output less the ids (and the
/// histories, unless a $project kept them).
async fn old_path(
    alerts: &AlertService,
    filters: &FilterStore,
    stream_id: &str,
    stages: &Value,
    candids: &[i64],
) -> BTreeMap<i64, String> {
    let schema = alerts.survey_schema().await.expect("survey schema");
    let streams = filters.streams().await.expect("streams");
    let stream = streams
        .iter()
        .find(|s| s.stream_id == stream_id)
        .expect("stream");
    let p = pipeline::compile(stages, &schema, &stream.bounds(&schema))
        .expect("compiles")
        .pipeline;
    let reader = common::agent("tenant-a", "agent-a");
    let mut out = BTreeMap::new();
    for &candid in candids {
        let found = alerts
            .packet(&reader, "ztf-archive", &candid.to_string())
            .await
            .expect("stored alert");
        let mut doc = packet_document(found.packet.expect("packet"));
        let programid = doc["candidate"]["programid"].as_i64().expect("programid");
        if !stream
            .programids()
            .iter()
            .any(|&q| i64::from(q) == programid)
        {
            continue;
        }
        strip(&mut doc, &stream.withheld());
        if !p.passes(&doc) {
            continue;
        }
        let Some(Value::Object(mut fields)) = p.eval(&doc) else {
            panic!("{candid} passed and has no output");
        };
        for key in ["candid", "objectId", "schemavsn"] {
            fields.remove(key);
        }
        if !p.projects() {
            fields.remove("prv_candidates");
            fields.remove("fp_hists");
        }
        out.insert(
            candid,
            serde_json::to_string(&Value::Object(fields)).expect("json"),
        );
    }
    out
}

async fn saved(filters: &FilterStore, filter_id: &str) -> BTreeMap<i64, String> {
    filters
        .latest_matches(filter_id, 10_000)
        .await
        .expect("matches")
        .into_iter()
        .map(|m| (m.candid, m.fields))
        .collect()
}

/// `bytes`, an Avro container, with another sync marker: the same alerts
/// in a file of other bytes (another checksum), as a producer resending
/// them would write it. Every block ends with the marker, so the last 16
/// bytes are it.
fn with_other_marker(bytes: &[u8]) -> Vec<u8> {
    let marker: Vec<u8> = bytes[bytes.len() - 16..].to_vec();
    let other: Vec<u8> = marker.iter().map(|b| b ^ 0x5a).collect();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i..].starts_with(&marker) {
            out.extend_from_slice(&other);
            i += 16;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    out
}

async fn history_versions_run_on_the_ingests_decode(db: ithaca_kit::db::Db) {
    let (alerts, _) = astro::services(db.clone());
    let filters = FilterStore::new(db.clone());
    let service = FilterService::new(filters.clone(), alerts.clone());
    let hook = Arc::new(Counting {
        live: service.live().clone(),
        seen: Seen::default(),
        watched: Mutex::new((0, 0)),
    });
    assert!(alerts.set_ingest_hook(hook.clone()).is_ok());
    let who = Principal::system("live").in_session(Some("live".into()));
    let group = service.targets(&who).await.expect("targets").groups[0]
        .row
        .group_id
        .clone();
    let mut ids = Vec::new();
    for (name, stream, stages) in versions() {
        let view = service
            .post_filter(
                &who,
                NewFilter {
                    name: name.into(),
                    group_id: group.clone(),
                    stream_id: stream.into(),
                    ..Default::default()
                },
            )
            .await
            .unwrap_or_else(|e| panic!("post_filter: {}", e.message));
        activate(&service, &who, &view.row.filter_id, &stages).await;
        ids.push(view.row.filter_id);
    }

    // Every real alert arrives, one file at a time.
    let files: Vec<PathBuf> = astro::avro_files(&astro::alerts_dir());
    let mut candids = Vec::new();
    for path in &files {
        let bytes = std::fs::read(path).expect("read");
        let name = path.file_name().expect("name").to_string_lossy();
        let report = alerts
            .ingest_file(&Principal::system(""), "", &name, bytes)
            .await
            .unwrap_or_else(|e| panic!("{name}: {}", e.message));
        assert_eq!(report.stored, report.alerts, "{name}");
        candids.extend(report.candids);
    }

    // Each alert handed to a watcher once, every file watched, none left to
    // the path that decodes stored packets.
    let seen = hook.seen.lock().expect("seen").clone();
    assert_eq!(seen.len(), candids.len());
    assert!(seen.values().all(|&n| n == 1), "{seen:?}");
    assert_eq!(*hook.watched.lock().expect("watched"), (files.len(), 0));

    // The same matches, with the same fields, as decoding each stored
    // packet whole made.
    let mut before = Vec::new();
    for ((name, stream, stages), id) in versions().iter().zip(&ids) {
        let want = old_path(&alerts, &filters, stream, stages, &candids).await;
        let got = saved(&filters, id).await;
        assert!(!want.is_empty(), "{name}: a version that selects");
        assert_eq!(
            got.keys().collect::<BTreeSet<_>>(),
            want.keys().collect::<BTreeSet<_>>(),
            "{name}"
        );
        for (candid, fields) in &want {
            assert_eq!(&got[candid], fields, "{name}: fields of {candid}");
        }
        before.push(got);
    }
    // The history version's output carries the alert's other top-level
    // fields (its `publisher`), as the whole packet gave them.
    assert!(
        before[0].values().any(|f| f.contains("\"publisher\"")),
        "{:?}",
        before[0]
    );

    // Alerts stored before, in a file of other bytes: decoded and
    // evaluated again, stored never, matched never.
    let resent = with_other_marker(&std::fs::read(&files[0]).expect("read"));
    let report = alerts
        .ingest_file(&Principal::system(""), "", "resent.avro", resent)
        .await
        .unwrap_or_else(|e| panic!("resent: {}", e.message));
    assert!(!report.already_present && report.alerts > 0);
    assert_eq!(report.stored, 0);
    let seen = hook.seen.lock().expect("seen").clone();
    assert!(report.candids.iter().all(|c| seen[c] == 2), "{seen:?}");
    for (id, was) in ids.iter().zip(&before) {
        assert_eq!(&saved(&filters, id).await, was);
    }

    // The same file again: known by its checksum, nothing is watched.
    let again = std::fs::read(&files[0]).expect("read");
    let report = alerts
        .ingest_file(&Principal::system(""), "", "again.avro", again)
        .await
        .expect("again");
    assert!(report.already_present);
    assert_eq!(hook.watched.lock().expect("watched").0, files.len() + 1);
}
