//! The compact filter records (`alert_cuts`, issue 27) over the real ZTF
//! alerts of `../shared/data`, on SQLite and PostgreSQL:
//!
//! - every preview answers the same read from the records (with the
//!   pipeline's first cuts applied in SQL) as read from the candidates'
//!   JSON: counts, per-stage counts and the alerts returned, for pipelines
//!   the database can cut on and ones it cannot, programmes, windows,
//!   regions and withheld paths; and the same again when some records
//!   cannot carry their candidate (read from the candidate instead);
//! - an archive stored before the records existed migrates: a copy of it
//!   is opened, the migration finds alerts to backfill, a first run stops
//!   part way and previews stay right, a second resumes with progress and
//!   writes exactly the records an ingest writes.

use crate::common;

use common::astro;
use ithaca_broker::alerts::cuts::FIELDS;
use ithaca_broker::alerts::schema::{self, FlatField};
use ithaca_broker::alerts::{AlertService, AlertsConfig};
use ithaca_broker::filters::pipeline::{self, Pipeline, StreamBounds};
use ithaca_broker::filters::preview::{self, PreviewQuery, PreviewResult, Region};
use ithaca_kit::db::Db;
use ithaca_kit::with_pool;
use serde_json::{Value, json};

fn broker(db: Db) -> AlertService {
    ithaca_broker::astro(
        db,
        &common::key(),
        AlertsConfig {
            schema_dir: Some(astro::schema_dir()),
        },
    )
    .0
}

async fn compiled(alerts: &AlertService, stages: &Value) -> Pipeline {
    let (_, versions) = alerts.schema_versions().await.expect("schemas");
    let union: Vec<FlatField> =
        schema::union(versions.iter().map(|(v, f)| (v.as_str(), f.as_slice())))
            .into_iter()
            .map(|(f, _)| f)
            .collect();
    let stream = StreamBounds {
        programids: vec![1, 2, 3],
        fields: None,
    };
    pipeline::compile(stages, &union, &stream)
        .unwrap_or_else(|p| panic!("{stages}: {p:#?}"))
        .pipeline
}

fn query() -> PreviewQuery {
    PreviewQuery {
        broker_id: "ztf-archive".into(),
        limit: 40,
        ..Default::default()
    }
}

fn counterpart() -> Value {
    json!([
        {"$match": {
            "candidate.drb": {"$gt": 0.5},
            "candidate.isdiffpos": {"$in": ["t", "1"]},
            "candidate.nbad": {"$lte": 5},
            "candidate.fwhm": {"$lte": 5.5},
            "$or": [{"candidate.ndethist": {"$gte": 2}}, {"candidate.ssdistnr": {"$gte": 0}}],
            "$nor": [{"candidate.sgscore1": {"$gt": 0.76}, "candidate.distpsnr1": {"$lt": 2}}]
        }},
        {"$addFields": {"age_days": {"$subtract": ["$candidate.jd", "$candidate.jdstarthist"]}}},
        {"$match": {"age_days": {"$lt": 3000}}},
        {"$project": {"candidate.jd": 1, "candidate.magpsf": 1, "candidate.drb": 1, "age_days": 1}}
    ])
}

/// The previews compared: (what, pipeline, query).
async fn cases(alerts: &AlertService) -> Vec<(&'static str, Pipeline, PreviewQuery)> {
    let sorted = |path: &str, ascending: bool, limit: usize| PreviewQuery {
        sort_by: Some(path.to_owned()),
        ascending,
        limit,
        ..query()
    };
    let c = compiled(alerts, &counterpart()).await;
    let first = alerts
        .packet(
            &common::agent("tenant-a", "agent-a"),
            "ztf-archive",
            &astro::listed()[0].candid.to_string(),
        )
        .await
        .expect("an alert");
    vec![
        ("counterpart, count", c.clone(), query()),
        ("counterpart, by jd", c.clone(), sorted("candidate.jd", true, 5)),
        ("counterpart, by age", c.clone(), sorted("age_days", false, 3)),
        (
            "counterpart, one night",
            c.clone(),
            PreviewQuery {
                jd_start: Some(2_460_229.5),
                jd_end: Some(2_460_230.5),
                ..query()
            },
        ),
        (
            "counterpart, public and partnership, withheld paths",
            c.clone(),
            PreviewQuery {
                programids: vec![1, 2],
                withheld: vec!["candidate.programpi".into(), "fp_hists".into()],
                ..sorted("candidate.magpsf", true, 10)
            },
        ),
        (
            "counterpart, a cone around an alert",
            c.clone(),
            PreviewQuery {
                region: Some(Region::Cone {
                    ra_deg: first.row.ra,
                    dec_deg: first.row.dec,
                    radius_deg: 20.0,
                }),
                ..query()
            },
        ),
        (
            "everything, Caltech's programme",
            compiled(alerts, &json!([{"$match": {}}])).await,
            PreviewQuery {
                programids: vec![3],
                ..query()
            },
        ),
        (
            "operators the database leaves to the evaluator",
            compiled(
                alerts,
                &json!([{"$match": {
                    "candidate.drb": {"$ne": null},
                    "candidate.rb": {"$exists": true},
                    "candidate.fid": {"$nin": [3]},
                    "candidate.isdiffpos": {"$gt": "0"}
                }}]),
            )
            .await,
            sorted("candidate.rb", false, 40),
        ),
        (
            "two $match stages, integers",
            compiled(
                alerts,
                &json!([
                    {"$match": {"candidate.nbad": {"$gte": 0, "$lte": 2}, "candidate.ndethist": {"$in": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}}},
                    {"$match": {"candidate.fid": 1, "candidate.magpsf": {"$lt": 19.5}}}
                ]),
            )
            .await,
            sorted("candidate.ndethist", true, 40),
        ),
        (
            "equality on text, a float cut written as an integer",
            compiled(
                alerts,
                &json!([{"$match": {"candidate.isdiffpos": "t", "candidate.elong": {"$lt": 2}}}]),
            )
            .await,
            query(),
        ),
        (
            "$or and $nor, over a field old candidates lack (drb)",
            compiled(
                alerts,
                &json!([{"$match": {
                    "$nor": [
                        {"candidate.drb": {"$lt": 0.9}},
                        {"$or": [{"candidate.distpsnr1": {"$gt": 20}}, {"candidate.sgscore1": {"$in": [0.5, 1]}}]}
                    ],
                    "$or": [{"candidate.fid": 1}, {"candidate.magpsf": {"$lt": 18}}]
                }}]),
            )
            .await,
            sorted("candidate.jd", true, 40),
        ),
        (
            "a field the record does not hold",
            compiled(
                alerts,
                &json!([{"$match": {"candidate.drb": {"$gt": 0.5}, "candidate.scorr": {"$gt": 5}}}]),
            )
            .await,
            sorted("candidate.jd", false, 7),
        ),
    ]
}

async fn run_all(
    alerts: &AlertService,
    cases: &[(&str, Pipeline, PreviewQuery)],
) -> Vec<PreviewResult> {
    let mut out = Vec::new();
    for (what, p, q) in cases {
        out.push(
            preview::preview(alerts.store(), p, q)
                .await
                .unwrap_or_else(|e| panic!("{what}: {e:?}")),
        );
    }
    out
}

async fn exec(db: &Db, sql: &str) {
    with_pool!(db, pool => sqlx::query(sql).execute(pool).await.map(|_| ()))
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

async fn scalar(db: &Db, sql: &str) -> i64 {
    with_pool!(db, pool => sqlx::query_scalar::<_, i64>(sql).fetch_one(pool).await)
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// Every record as text, in candid order (one backend's rendering of its
/// own values, to compare records written two ways on one backend).
async fn records(db: &Db) -> Vec<String> {
    let fields: Vec<String> = FIELDS
        .iter()
        .map(|(name, _)| format!("COALESCE(CAST({name} AS TEXT), 'null')"))
        .collect();
    let sql = format!(
        "SELECT CAST(candid AS TEXT) || '|' || object_id || '|' || schemavsn || '|' || CAST(hpx AS TEXT) \
         || '|' || CAST(present AS TEXT) || '|' || {} FROM alert_cuts ORDER BY broker_id, candid",
        fields.join(" || '|' || ")
    );
    with_pool!(db, pool => sqlx::query_scalar::<_, String>(&sql).fetch_all(pool).await)
        .expect("records")
}

async fn equivalence(db: Db) {
    let alerts = broker(db.clone());
    astro::ingest_alerts(&alerts).await;
    assert!(
        alerts.store().cuts_ready().await.expect("state"),
        "a new archive needs no backfill"
    );
    assert_eq!(scalar(&db, "SELECT COUNT(*) FROM alert_cuts").await, 40);
    assert_eq!(
        scalar(&db, "SELECT COUNT(*) FROM alert_cuts WHERE present < 0").await,
        0,
        "every real candidate fits its record"
    );
    let cases = cases(&alerts).await;
    let from_records = run_all(&alerts, &cases).await;

    // The same previews from the candidates' JSON.
    exec(&db, "UPDATE archive_backfills SET done = 0").await;
    assert!(!alerts.store().cuts_ready().await.expect("state"));
    let from_json = run_all(&alerts, &cases).await;
    for (((what, _, _), a), b) in cases.iter().zip(&from_records).zip(&from_json) {
        assert_eq!(a, b, "{what}: records and candidates differ");
    }
    // Not vacuous: the cases split the alerts, and return some.
    let split = from_json
        .iter()
        .filter(|r| r.matched > 0 && r.matched < r.evaluated)
        .count();
    assert!(
        split >= 6,
        "only {split} cases split the alerts: {from_json:?}"
    );
    assert!(from_json.iter().filter(|r| !r.alerts.is_empty()).count() >= 5);

    // Records that cannot carry their candidate are read from it.
    exec(&db, "UPDATE archive_backfills SET done = 1").await;
    exec(
        &db,
        "UPDATE alert_cuts SET present = -1, drb = NULL, isdiffpos = NULL, nbad = NULL \
         WHERE candid IN (SELECT candid FROM alert_cuts ORDER BY candid LIMIT 13)",
    )
    .await;
    let spilled = run_all(&alerts, &cases).await;
    for (((what, _, _), a), b) in cases.iter().zip(&spilled).zip(&from_json) {
        assert_eq!(a, b, "{what}: with spilled records");
    }

    // The previews above did read the records, and the database applied
    // the first cut: with every record's drb at 0 nothing passes, and the
    // alerts evaluated are still all counted.
    exec(&db, "UPDATE alert_cuts SET present = 65535").await;
    exec(&db, "UPDATE alert_cuts SET drb = 0.0").await;
    let (_, counterpart, q) = &cases[0];
    let r = preview::preview(alerts.store(), counterpart, q)
        .await
        .expect("preview");
    assert_eq!((r.evaluated, r.matched), (40, 0), "{r:?}");
    assert_eq!(r.kept.first(), Some(&(0, 0)));
    assert!(from_json[0].matched > 0);
}

/// Take an archive back to before `alert_cuts` (as the previous release
/// left it): the two tables and their migration gone.
async fn unmigrate(db: &Db) {
    exec(db, "DROP TABLE alert_cuts").await;
    exec(db, "DROP TABLE archive_backfills").await;
    exec(db, "DELETE FROM _sqlx_migrations WHERE version = 10").await;
}

/// Open the archive at `url` (migrating it), check the backfill: stopped
/// part way, previews unchanged; resumed, with progress, to the records an
/// ingest writes.
async fn migrate(url: &str, schema: &str, written_by_ingest: &[String], want: &[PreviewResult]) {
    let db = ithaca_broker::open_db(url, schema).await.expect("reopen");
    let alerts = broker(db.clone());
    let store = alerts.store();
    assert!(
        !store.cuts_ready().await.expect("state"),
        "the migration finds alerts to backfill"
    );
    assert_eq!(scalar(&db, "SELECT COUNT(*) FROM alert_cuts").await, 0);
    let cases = cases(&alerts).await;

    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    let first = store
        .backfill_cuts(15, Some(1), Some(&tx))
        .await
        .expect("first run");
    assert_eq!((first.done, first.read, first.total), (false, 15, 40));
    assert_eq!(rx.try_recv().ok(), Some((15, 40)));
    assert_eq!(scalar(&db, "SELECT COUNT(*) FROM alert_cuts").await, 15);
    assert!(!store.cuts_ready().await.expect("state"));
    let halfway = run_all(&alerts, &cases).await;
    assert_eq!(halfway, want, "previews part way through the backfill");

    let rest = store
        .backfill_cuts(15, None, Some(&tx))
        .await
        .expect("resumed");
    assert_eq!((rest.done, rest.read), (true, 25));
    let mut seen = Vec::new();
    while let Ok(p) = rx.try_recv() {
        seen.push(p);
    }
    assert_eq!(seen, vec![(30, 40), (40, 40)]);
    assert!(store.cuts_ready().await.expect("state"));
    assert_eq!(
        records(&db).await,
        written_by_ingest,
        "backfilled records are the ingest's"
    );
    let again = store.backfill_cuts(15, None, None).await.expect("again");
    assert_eq!((again.done, again.read), (true, 0));
    assert_eq!(
        run_all(&alerts, &cases).await,
        want,
        "previews from the records"
    );
    db.close().await;
}

/// Ingest into a fresh archive and note its records and previews.
async fn reference(db: &Db) -> (Vec<String>, Vec<PreviewResult>) {
    let alerts = broker(db.clone());
    astro::ingest_alerts(&alerts).await;
    let cases = cases(&alerts).await;
    (records(db).await, run_all(&alerts, &cases).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alert_cuts_answer_as_candidates_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = ithaca_broker::open_db(&common::sqlite_path(&dir, "broker"), "unused")
        .await
        .expect("open");
    equivalence(db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alert_cuts_answer_as_candidates_postgres() {
    let Some(url) = common::postgres("alert_cuts_answer_as_candidates_postgres") else {
        return;
    };
    let schema = common::unique_schema("cuts");
    let db = ithaca_broker::open_db(&url, &schema).await.expect("open");
    equivalence(db.clone()).await;
    db.close().await;
    common::drop_schema(&url, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alert_cuts_backfill_a_copy_of_an_archive_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = common::sqlite_path(&dir, "broker");
    let db = ithaca_broker::open_db(&path, "unused").await.expect("open");
    let (records, previews) = reference(&db).await;
    unmigrate(&db).await;
    exec(&db, "PRAGMA wal_checkpoint(TRUNCATE)").await;
    db.close().await;
    // A copy of the archive file, as an operator would upgrade.
    let file = path
        .trim_start_matches("sqlite://")
        .split('?')
        .next()
        .expect("file")
        .to_owned();
    let copy = format!("{file}.copy");
    // The archive with its write-ahead log, if closing left one (SQLite
    // checkpoints at the last close, but not always at once).
    std::fs::copy(&file, &copy).expect("copy the archive");
    for suffix in ["-wal", "-shm"] {
        let part = format!("{file}{suffix}");
        if std::path::Path::new(&part).exists() {
            std::fs::copy(&part, format!("{copy}{suffix}")).expect("copy the log");
        }
    }
    let url = path.replace(&file, &copy);
    migrate(&url, "unused", &records, &previews).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alert_cuts_backfill_a_copy_of_an_archive_postgres() {
    let Some(url) = common::postgres("alert_cuts_backfill_a_copy_of_an_archive_postgres") else {
        return;
    };
    let schema = common::unique_schema("cutsmig");
    let db = ithaca_broker::open_db(&url, &schema).await.expect("open");
    let (records, previews) = reference(&db).await;
    unmigrate(&db).await;
    db.close().await;
    migrate(&url, &schema, &records, &previews).await;
    common::drop_schema(&url, &schema).await;
}
