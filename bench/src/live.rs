//! The live filter path: alerts ingested through the broker's own ingest
//! while active filter versions run on every newly stored alert, on SQLite
//! and PostgreSQL. For each kind of clone (the archive's, without history,
//! and whole packets less cutouts, as ZTF sends them) three phases ingest
//! the same number of alerts: no active version, `--filters` versions that
//! read only the candidate, and the same with one version reading the
//! history (which makes every alert's packet decoded). Each phase reports
//! ingest alerts/s (decode, store, filters) and, timed inside the ingest
//! hook, the filters' own alerts/s (documents, evaluation of every version,
//! the batch's matches saved and trimmed); when a version reads the history
//! the hook watches the decode (issue 27 §3), and the time its watcher
//! spends on each decoded alert is counted too.
//!
//! The versions are posted, previewed and activated through the filter
//! service as an agent's calls would be (a system principal in one session),
//! half on the public stream (which withholds paths, so each alert is also
//! stripped once) and half on the partnership stream.

use crate::alerts::Generator;
use apache_avro::types::Value as AvroValue;
use ithaca_broker::alerts::avro::DecodedAlert;
use ithaca_broker::alerts::service::{AlertsConfig, FileWatch, IngestHook, StoredBatch};
use ithaca_broker::filters::defaults;
use ithaca_broker::filters::live::{LiveFilters, LiveWatch};
use ithaca_broker::filters::run::RunArgs;
use ithaca_broker::filters::service::{FilterService, NewFilter};
use ithaca_broker::filters::store::FilterStore;
use ithaca_kit::principal::{InternalKey, Principal};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the live-filters phase does.
#[derive(Debug, Clone, clap::Args)]
pub struct LiveArgs {
    /// Alerts ingested in each phase.
    #[arg(long, default_value_t = 10_000)]
    pub alerts: u64,
    /// Alerts per Avro container (one ingest, one batch through the filters).
    #[arg(long, default_value_t = 1000)]
    pub per_file: usize,
    /// Active versions.
    #[arg(long, default_value_t = 10)]
    pub filters: usize,
    /// The real packets to clone (`../shared/data/ztf/alerts`).
    #[arg(long, default_value = "../shared/data/ztf/alerts")]
    pub data: PathBuf,
    /// Where the SQLite database goes (deleted afterwards).
    #[arg(long, default_value = "target/ithaca-bench/filters-live")]
    pub work_dir: PathBuf,
    /// PostgreSQL; a fresh schema is created and dropped. `none` skips it.
    #[arg(
        long,
        env = "ITHACA_BENCH_POSTGRES_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/test"
    )]
    pub postgres_url: String,
    /// Skip SQLite (PostgreSQL only).
    #[arg(long)]
    pub skip_sqlite: bool,
}

/// The live path, timed inside the ingest hook.
struct Timed {
    live: LiveFilters,
    totals: Arc<Mutex<Totals>>,
}

/// A file's watcher, timed on the decode thread and after the store.
struct TimedWatch {
    inner: LiveWatch,
    totals: Arc<Mutex<Totals>>,
    spent: Duration,
}

#[derive(Clone, Copy, Debug, Default)]
struct Totals {
    spent: Duration,
    alerts: u64,
    matches: u64,
    failures: u64,
}

impl Totals {
    fn add(&mut self, spent: Duration, alerts: u64, outcome: Option<usize>) {
        self.spent += spent;
        self.alerts += alerts;
        match outcome {
            Some(matches) => self.matches += matches as u64,
            None => self.failures += 1,
        }
    }
}

#[tonic::async_trait]
impl FileWatch for TimedWatch {
    fn decoded(&mut self, alert: &DecodedAlert, value: &AvroValue) {
        let started = Instant::now();
        self.inner.decoded(alert, value);
        self.spent += started.elapsed();
    }

    async fn stored(self: Box<Self>, batch: StoredBatch) {
        let started = Instant::now();
        let n = batch.alerts.len() as u64;
        let (spent, totals) = (self.spent, self.totals.clone());
        let outcome = self.inner.finish(batch).await;
        if let Ok(mut t) = totals.lock() {
            t.add(
                spent + started.elapsed(),
                n,
                outcome.ok().map(|r| r.matches),
            );
        }
    }
}

#[tonic::async_trait]
impl IngestHook for Timed {
    async fn watch(&self, broker_id: &str) -> Option<Box<dyn FileWatch>> {
        let inner = self.live.watch(broker_id).await?;
        Some(Box::new(TimedWatch {
            inner,
            totals: self.totals.clone(),
            spent: Duration::ZERO,
        }))
    }

    async fn stored(&self, batch: StoredBatch) {
        let started = Instant::now();
        let n = batch.alerts.len() as u64;
        let outcome = self.live.run(batch).await;
        let spent = started.elapsed();
        if let Ok(mut t) = self.totals.lock() {
            t.add(spent, n, outcome.ok().map(|r| r.matches));
        }
    }
}

/// One phase's figures.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Phase {
    pub database: String,
    pub clones: String,
    pub phase: String,
    pub alerts: u64,
    pub ingest_per_s: f64,
    pub filters_per_s: f64,
    pub filters_ms_per_batch: f64,
    pub matches: u64,
}

/// The `i`th version: the ZTF quality cuts of a real, positive, clean
/// subtraction with a magnitude cut of its own, and the defaults' projection,
/// so the versions differ and pass different shares of the clones.
fn candidate_version(i: usize) -> Value {
    let defaults = defaults::defaults(None)
        .expect("the defaults need no trigger")
        .pipeline;
    json!([
        {"$match": {
            "candidate.isdiffpos": {"$in": ["t", "1"]},
            "candidate.drb": {"$gte": 0.5},
            "candidate.nbad": {"$lte": 5},
            "candidate.magpsf": {"$lt": 16.0 + 0.4 * i as f64}
        }},
        defaults[1].clone()
    ])
}

/// A version that reads the history: recent detections brighter than 19.
fn history_version() -> Value {
    json!([{"$match": {
        "candidate.drb": {"$gte": 0.5},
        "prv_candidates.magpsf": {"$lt": 19.0}
    }}])
}

async fn activate(
    service: &FilterService,
    who: &Principal,
    filter_id: &str,
    pipeline: &Value,
) -> anyhow::Result<()> {
    let err = |e: ithaca_kit::error::ServiceError| anyhow::anyhow!("{}", e.message);
    let verdict = service
        .post_version(who, filter_id, pipeline)
        .await
        .map_err(err)?;
    anyhow::ensure!(verdict.passed, "{:?}", verdict.problems);
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
        .map_err(err)?;
    service
        .activate(who, filter_id, i32::try_from(verdict.version)?, false)
        .await
        .map_err(err)?;
    Ok(())
}

/// The three phases for one kind of clone, on a fresh database.
async fn one_database(
    args: &LiveArgs,
    url: &str,
    schema: &str,
    label: &str,
    history: bool,
) -> anyhow::Result<Vec<Phase>> {
    let key = InternalKey::new(b"bench-live-filters-key-0123456789abcdefgh".to_vec())?;
    let db = ithaca_broker::open_db(url, schema).await?;
    let (alerts, _) = ithaca_broker::astro(db.clone(), &key, AlertsConfig::default());
    let service = FilterService::new(FilterStore::new(db.clone()), alerts.clone());
    let timed = Arc::new(Timed {
        live: service.live().clone(),
        totals: Arc::new(Mutex::new(Totals::default())),
    });
    if alerts.set_ingest_hook(timed.clone()).is_err() {
        anyhow::bail!("the alert service already has an ingest hook");
    }
    let admin = Principal::system("");
    let who = Principal::system("bench").in_session(Some("bench".into()));
    let mut generator = Generator::new(&args.data)?;
    let mut out = Vec::new();

    // Every writer schema must be known before pipelines compile: the
    // generator moves to the next template schema with each container.
    for i in 0..8 {
        let (bytes, _) = generator.container(100, true)?;
        alerts
            .ingest_file(&admin, "", &format!("warm-up-{i}.avro"), bytes)
            .await?;
    }

    let group = service
        .targets(&who)
        .await
        .map_err(|e| anyhow::anyhow!(e.message))?
        .groups[0]
        .row
        .group_id
        .clone();
    let mut ids = Vec::new();
    for i in 0..args.filters {
        let stream = if i % 2 == 0 {
            "ztf-public"
        } else {
            "ztf-partnership"
        };
        let view = service
            .post_filter(
                &who,
                NewFilter {
                    name: format!("bench {i}"),
                    group_id: group.clone(),
                    stream_id: stream.into(),
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| anyhow::anyhow!(e.message))?;
        ids.push(view.row.filter_id);
    }

    let clones = if history {
        "whole (history, no cutouts)"
    } else {
        "archive (no history)"
    };
    for phase in [
        "no active version",
        "candidate-only versions",
        "one reads history",
    ] {
        match phase {
            "candidate-only versions" => {
                for (i, id) in ids.iter().enumerate() {
                    activate(&service, &who, id, &candidate_version(i)).await?;
                }
            }
            "one reads history" => {
                activate(&service, &who, &ids[0], &history_version()).await?;
            }
            _ => {}
        }
        let before = timed.totals.lock().map(|t| *t).unwrap_or_default();
        let mut spent = Duration::ZERO;
        let mut done = 0u64;
        while done < args.alerts {
            let count = args.per_file.min((args.alerts - done) as usize);
            let (bytes, _) = generator.container(count, history)?;
            let started = Instant::now();
            alerts
                .ingest_file(&admin, "", &format!("live-{phase}-{done}.avro"), bytes)
                .await?;
            spent += started.elapsed();
            done += count as u64;
        }
        let after = timed.totals.lock().map(|t| *t).unwrap_or_default();
        anyhow::ensure!(
            after.failures == before.failures,
            "the filters failed on a batch"
        );
        let hook = after.spent - before.spent;
        let batches = done.div_ceil(args.per_file as u64).max(1);
        let idle = phase == "no active version";
        let row = Phase {
            database: label.to_owned(),
            clones: clones.to_owned(),
            phase: if idle {
                phase.to_owned()
            } else {
                format!("{} active: {phase}", args.filters)
            },
            alerts: done,
            ingest_per_s: done as f64 / spent.as_secs_f64().max(1e-9),
            filters_per_s: if idle {
                f64::NAN
            } else {
                (after.alerts - before.alerts) as f64 / hook.as_secs_f64().max(1e-9)
            },
            filters_ms_per_batch: hook.as_secs_f64() * 1000.0 / batches as f64,
            matches: after.matches - before.matches,
        };
        eprintln!("filters-live[{label}]: {row:?}");
        out.push(row);
    }
    db.close().await;
    Ok(out)
}

/// Run the live-filters phase on SQLite and, unless `none`, PostgreSQL.
pub async fn run(args: LiveArgs) -> anyhow::Result<Vec<Phase>> {
    std::fs::create_dir_all(&args.work_dir)?;
    let mut out = Vec::new();
    for history in [false, true] {
        if !args.skip_sqlite {
            let file = args.work_dir.join("filters-live.db");
            let remove = || {
                for suffix in ["", "-wal", "-shm"] {
                    let _ = std::fs::remove_file(format!("{}{suffix}", file.display()));
                }
            };
            remove();
            let url = file.display().to_string();
            let result = one_database(&args, &url, "unused", "sqlite", history).await;
            remove();
            out.extend(result?);
        }
        if args.postgres_url != "none" {
            let schema = format!("bench_live_{}_{history}", std::process::id());
            let result =
                one_database(&args, &args.postgres_url, &schema, "postgres", history).await;
            let pool = sqlx::PgPool::connect(&args.postgres_url).await?;
            sqlx::query(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
                .execute(&pool)
                .await?;
            out.extend(result?);
        }
    }
    println!(
        "{:<10} {:<28} {:<40} {:>8} {:>10} {:>11} {:>13} {:>8}",
        "database",
        "clones",
        "phase",
        "alerts",
        "ingest/s",
        "filters/s",
        "filters ms/1k",
        "matches"
    );
    for p in &out {
        println!(
            "{:<10} {:<28} {:<40} {:>8} {:>10.0} {:>11.0} {:>13.2} {:>8}",
            p.database,
            p.clones,
            p.phase,
            p.alerts,
            p.ingest_per_s,
            p.filters_per_s,
            p.filters_ms_per_batch,
            p.matches
        );
    }
    let report = args.work_dir.join("report.json");
    std::fs::write(&report, serde_json::to_string_pretty(&out)?)?;
    println!("report: {}", report.display());
    Ok(out)
}
