//! The filters phase: a ZTF "counterpart search defaults" pipeline (quality
//! cuts, an age from the detection history, a projection) previewed over a
//! large archive of cloned ZTF packets, on SQLite and PostgreSQL: a count
//! over the whole archive, the top 100 by time, and a region (a 10° GCN
//! localisation as a MOC). Each figure is alerts evaluated per second of
//! wall time and per second of this process's CPU time (user + system, all
//! threads: "per core"); on PostgreSQL the server's own CPU (every local
//! `postgres` process) is measured beside it, and "per core, all" counts
//! both.
//!
//! What bounds the figure is measured beside it: a bare read of the same
//! rows (the database's floor), and in memory, on one thread, the three
//! steps an alert goes through: parsing the whole `candidate` JSON, reading
//! only the fields the pipeline needs (what the preview does), and the
//! evaluation alone on parsed documents.

use crate::alerts::Generator;
use anyhow::Context;
use ithaca_broker::alerts::schema::{self, FlatField};
use ithaca_broker::alerts::service::AlertsConfig;
use ithaca_broker::filters::pipeline::{self, CandidateNeeds, Pipeline, StreamBounds};
use ithaca_broker::filters::preview::{self, PreviewQuery, Region};
use ithaca_kit::principal::{InternalKey, Principal};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio_stream::StreamExt;

/// What the filters phase does.
#[derive(Debug, Clone, clap::Args)]
pub struct FiltersArgs {
    /// Alerts in the SQLite archive (history and cutouts dropped).
    #[arg(long, default_value_t = 1_000_000)]
    pub alerts: u64,
    /// Alerts in the PostgreSQL archive.
    #[arg(long, default_value_t = 200_000)]
    pub postgres_alerts: u64,
    /// Alerts per Avro container.
    #[arg(long, default_value_t = 1000)]
    pub per_file: usize,
    /// Times each preview is run (the best is reported).
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// Alerts held in memory for the evaluation-only figures.
    #[arg(long, default_value_t = 200_000)]
    pub eval_alerts: usize,
    /// The real packets to clone (`../shared/data/ztf/alerts`).
    #[arg(long, default_value = "../shared/data/ztf/alerts")]
    pub data: PathBuf,
    /// Where the SQLite archive goes (deleted afterwards unless --keep).
    #[arg(long, default_value = "target/ithaca-bench/filters")]
    pub work_dir: PathBuf,
    /// PostgreSQL; a fresh schema is created and dropped. `none` skips it.
    #[arg(
        long,
        env = "ITHACA_BENCH_POSTGRES_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/test"
    )]
    pub postgres_url: String,
    /// Keep the SQLite archive.
    #[arg(long)]
    pub keep: bool,
    /// Reuse the SQLite archive a `--keep` run left.
    #[arg(long)]
    pub reuse: bool,
    /// Skip SQLite (PostgreSQL only).
    #[arg(long)]
    pub skip_sqlite: bool,
}

/// The pipeline measured: ZTF quality cuts of a counterpart search (real
/// and positive, few bad pixels, a sane PSF, seen before or near a known
/// solar-system object, not a PS1 star), the age since the first
/// detection, and the fields a counterpart list shows. (The usual "not a
/// known asteroid" cut would pass none of the cloned packets: their new
/// objects all sit on asteroids, their others are variable stars.)
pub fn counterpart_defaults() -> Value {
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
        {"$match": {"age_days": {"$lt": 3650}}},
        {"$project": {
            "candidate.jd": 1, "candidate.ra": 1, "candidate.dec": 1, "candidate.magpsf": 1,
            "candidate.fid": 1, "candidate.drb": 1, "age_days": 1
        }}
    ])
}

/// One timed run.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Rate {
    pub what: String,
    pub evaluated: u64,
    pub matched: u64,
    pub wall_s: f64,
    pub cpu_s: f64,
    pub per_s: f64,
    pub per_core_s: f64,
    /// The PostgreSQL server's CPU seconds over the same run (0 on SQLite).
    pub server_cpu_s: f64,
    /// Alerts per second of this process's and the server's CPU together.
    pub per_core_all_s: f64,
}

impl Rate {
    fn new(what: &str, evaluated: u64, matched: u64, wall: Duration, cpu: f64) -> Rate {
        let wall_s = wall.as_secs_f64().max(1e-9);
        Rate {
            what: what.to_owned(),
            evaluated,
            matched,
            wall_s,
            cpu_s: cpu,
            per_s: evaluated as f64 / wall_s,
            per_core_s: evaluated as f64 / cpu.max(1e-9),
            server_cpu_s: 0.0,
            per_core_all_s: evaluated as f64 / cpu.max(1e-9),
        }
    }

    /// Count the database server's CPU seconds too.
    fn with_server(mut self, server_cpu: f64) -> Rate {
        self.server_cpu_s = server_cpu;
        self.per_core_all_s = self.evaluated as f64 / (self.cpu_s + server_cpu).max(1e-9);
        self
    }
}

/// The PostgreSQL server's CPU seconds so far, or 0 on SQLite.
fn server_cpu(postgres: bool) -> f64 {
    if postgres {
        crate::disk::postgres_cpu_seconds()
    } else {
        0.0
    }
}

/// Figures of one database.
#[derive(Debug, Default, serde::Serialize)]
pub struct DbFigures {
    pub database: String,
    pub alerts: u64,
    pub disk: Option<crate::disk::Disk>,
    pub rates: Vec<Rate>,
}

/// CPU seconds this process has used (user + system, every thread), from
/// `/proc/self/stat` in clock ticks of 1/100 s (Linux's USER_HZ).
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return f64::NAN;
    };
    // Fields after the command name (which is in parentheses and may hold
    // spaces): state is field 3, utime 14, stime 15.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return f64::NAN;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
    match (ticks(11), ticks(12)) {
        (Some(u), Some(s)) => (u + s) / 100.0,
        _ => f64::NAN,
    }
}

async fn timed_preview(
    store: &ithaca_broker::alerts::store::AlertStore,
    p: &Pipeline,
    q: &PreviewQuery,
    what: &str,
    repeat: usize,
) -> anyhow::Result<Rate> {
    let mut best: Option<Rate> = None;
    let postgres = store.db().is_postgres();
    for _ in 0..repeat.max(1) {
        let server = server_cpu(postgres);
        let cpu = cpu_seconds();
        let started = Instant::now();
        let r = preview::preview(store, p, q)
            .await
            .map_err(|e| anyhow::anyhow!("{what}: {}", e.message))?;
        let rate = Rate::new(
            what,
            r.evaluated,
            r.matched,
            started.elapsed(),
            cpu_seconds() - cpu,
        )
        .with_server(server_cpu(postgres) - server);
        if what.contains("sorted") {
            anyhow::ensure!(
                r.alerts.len() == q.limit.min(r.matched as usize),
                "{what}: {} alerts",
                r.alerts.len()
            );
        }
        if best.as_ref().is_none_or(|b| rate.wall_s < b.wall_s) {
            best = Some(rate);
        }
    }
    let best = best.expect("at least one run");
    eprintln!("filters: {what}: {best:?}");
    Ok(best)
}

async fn one_database(
    args: &FiltersArgs,
    url: &str,
    schema_name: &str,
    label: &str,
    alerts: u64,
    reuse: bool,
) -> anyhow::Result<DbFigures> {
    let key = InternalKey::new(b"bench-filters-internal-key-0123456789abcdef".to_vec())?;
    let db = ithaca_broker::open_db(url, schema_name).await?;
    let (service, _) = ithaca_broker::astro(db.clone(), &key, AlertsConfig::default());
    let admin = Principal::system("");
    let mut figures = DbFigures {
        database: label.to_owned(),
        ..Default::default()
    };
    if !reuse {
        let mut generator = Generator::new(&args.data)?;
        let mut done = 0;
        let started = Instant::now();
        while done < alerts {
            let count = args.per_file.min((alerts - done) as usize);
            let (bytes, _) = generator.container(count, false)?;
            service
                .ingest_file(&admin, "", &format!("archive-{done}.avro"), bytes)
                .await?;
            done += count as u64;
            if done % 100_000 < count as u64 {
                eprintln!(
                    "filters[{label}]: {done}/{alerts} stored ({:.0} s)",
                    started.elapsed().as_secs_f64()
                );
            }
        }
    }
    let (_, versions) = service
        .schema_versions()
        .await
        .map_err(|e| anyhow::anyhow!(e.message))?;
    let union: Vec<FlatField> =
        schema::union(versions.iter().map(|(v, f)| (v.as_str(), f.as_slice())))
            .into_iter()
            .map(|(f, _)| f)
            .collect();
    let stream = StreamBounds {
        programids: vec![1, 2, 3],
        fields: None,
    };
    let checked = pipeline::compile(&counterpart_defaults(), &union, &stream)
        .map_err(|p| anyhow::anyhow!("the defaults do not compile: {p:?}"))?;
    let p = checked.pipeline;
    let store = service.store();
    let stats = store.broker_stats().await?;
    figures.alerts = stats.iter().map(|s| s.alerts as u64).sum();
    eprintln!(
        "filters[{label}]: {} alerts; needs {:?}",
        figures.alerts,
        p.needs()
    );

    let disk = crate::disk::measure(&db).await?;
    let (with_cuts, without) = disk.per_alert(figures.alerts);
    eprintln!(
        "filters[{label}]: disk {:.0} MB, {with_cuts:.0} B per alert ({without:.0} B without the compact record)",
        disk.total_bytes as f64 / 1e6
    );
    figures.disk = Some(disk);

    // The floors: the same rows read and dropped, as the preview read them
    // before the compact record (the candidate's JSON) and as it reads them
    // now (every column of `alert_cuts`).
    let postgres = db.is_postgres();
    for (what, sql) in [
        (
            "read rows only (candid, candidate JSON)",
            "SELECT candid, candidate FROM alerts WHERE broker_id = $1 AND jd >= $2 AND jd <= $3",
        ),
        (
            "read rows only (alert_cuts, every column)",
            "SELECT candid, object_id, schemavsn, present, jd, fid, programid, isdiffpos, drb, rb, \
             nbad, fwhm, elong, magpsf, sigmapsf, ndethist, ssdistnr, sgscore1, distpsnr1, \
             jdstarthist FROM alert_cuts WHERE broker_id = $1 AND jd >= $2 AND jd <= $3",
        ),
    ] {
        let server = server_cpu(postgres);
        let cpu = cpu_seconds();
        let started = Instant::now();
        let mut rows = 0u64;
        ithaca_kit::with_pool!(db, pool => {
            let mut s = sqlx::query(sql)
                .bind("ztf-archive").bind(f64::MIN).bind(f64::MAX).fetch(pool);
            while let Some(row) = s.next().await {
                let _ = row?;
                rows += 1;
            }
        });
        let rate = Rate::new(what, rows, 0, started.elapsed(), cpu_seconds() - cpu)
            .with_server(server_cpu(postgres) - server);
        eprintln!("filters[{label}]: {rate:?}");
        figures.rates.push(rate);
    }

    if !db.is_postgres() && std::env::var_os("FILTERS_EXPERIMENTS").is_some() {
        for (what, sql) in [
            (
                "read tiny rows (candid, hpx)",
                "SELECT candid, hpx FROM alerts WHERE broker_id = $1 AND jd >= $2 AND jd <= $3",
            ),
            (
                "read json_extract of 10 fields",
                "SELECT candid, json_extract(candidate, '$.drb', '$.isdiffpos', '$.ndethist', '$.nbad', '$.fwhm', '$.ssdistnr', '$.sgscore1', '$.distpsnr1', '$.jd', '$.jdstarthist') FROM alerts WHERE broker_id = $1 AND jd >= $2 AND jd <= $3",
            ),
            (
                "read length(candidate)",
                "SELECT candid, length(candidate) FROM alerts WHERE broker_id = $1 AND jd >= $2 AND jd <= $3",
            ),
        ] {
            let cpu = cpu_seconds();
            let started = Instant::now();
            let mut n = 0u64;
            ithaca_kit::with_pool!(db, pool => {
                let mut s = sqlx::query(sql).bind("ztf-archive").bind(f64::MIN).bind(f64::MAX).fetch(pool);
                while let Some(row) = s.next().await {
                    let _ = row?;
                    n += 1;
                }
            });
            let r = Rate::new(what, n, 0, started.elapsed(), cpu_seconds() - cpu);
            eprintln!("filters[{label}]: {r:?}");
            figures.rates.push(r);
        }
    }

    let base = PreviewQuery {
        broker_id: "ztf-archive".into(),
        limit: 100,
        ..Default::default()
    };
    figures.rates.push(
        timed_preview(
            store,
            &p,
            &base,
            "preview: count, whole archive",
            args.repeat,
        )
        .await?,
    );
    let sorted = PreviewQuery {
        sort_by: Some("candidate.jd".into()),
        ascending: true,
        ..base.clone()
    };
    figures.rates.push(
        timed_preview(
            store,
            &p,
            &sorted,
            "preview: sorted top 100, whole archive",
            args.repeat,
        )
        .await?,
    );
    let programme = PreviewQuery {
        programids: vec![1],
        ..base.clone()
    };
    figures.rates.push(
        timed_preview(
            store,
            &p,
            &programme,
            "preview: count, programid 1",
            args.repeat,
        )
        .await?,
    );
    let region = PreviewQuery {
        region: Some(Region::Cone {
            ra_deg: 150.0,
            dec_deg: 20.0,
            radius_deg: 10.0,
        }),
        ..base.clone()
    };
    figures.rates.push(
        timed_preview(
            store,
            &p,
            &region,
            "preview: count, 10° region",
            args.repeat,
        )
        .await?,
    );
    Ok(figures)
}

/// A stored alert held in memory: candid, objectId, candidate JSON.
type Row = (i64, String, String);

/// In memory, one thread: whole parse + eval, field subset + eval (the
/// preview's way), eval alone.
async fn evaluation_only(args: &FiltersArgs, url: &str) -> anyhow::Result<Vec<Rate>> {
    let pool = sqlx::SqlitePool::connect(url).await?;
    let rows: Vec<Row> = sqlx::query_as("SELECT candid, object_id, candidate FROM alerts LIMIT $1")
        .bind(args.eval_alerts as i64)
        .fetch_all(&pool)
        .await?;
    pool.close().await;
    let fields: Vec<FlatField> = {
        let dir = args.data.join("../schema/v4.02");
        schema::flatten_files(&dir)
            .map_err(anyhow::Error::msg)
            .context("the schema files")?
            .1
    };
    let p = pipeline::compile(&counterpart_defaults(), &fields, &StreamBounds::default())
        .map_err(|e| anyhow::anyhow!("{e:?}"))?
        .pipeline;
    let CandidateNeeds::Keys(names) = p.needs().candidate.clone() else {
        anyhow::bail!("the defaults read named candidate fields");
    };
    let keys = pipeline::scan::KeySet::new(names);
    let n = rows.len() as u64;
    let mut out = Vec::new();

    let run =
        |what: &str, f: &mut dyn FnMut(&Row) -> anyhow::Result<bool>| -> anyhow::Result<Rate> {
            let cpu = cpu_seconds();
            let started = Instant::now();
            let mut matched = 0;
            for r in &rows {
                if f(r)? {
                    matched += 1;
                }
            }
            let rate = Rate::new(what, n, matched, started.elapsed(), cpu_seconds() - cpu);
            eprintln!("filters: {what}: {rate:?}");
            Ok(rate)
        };
    out.push(run(
        "in memory: whole candidate parsed + eval",
        &mut |(candid, object_id, text)| {
            let candidate: Value = serde_json::from_str(text)?;
            Ok(p.passes(&preview::alert_document(object_id, *candid, "", candidate)))
        },
    )?);
    out.push(run("in memory: needed fields read + eval", &mut |(
        candid,
        object_id,
        text,
    )| {
        let part = pipeline::scan::object_subset(text, &keys)?;
        Ok(p.passes(&preview::alert_document(
            object_id,
            *candid,
            "",
            Value::Object(part),
        )))
    })?);
    out.push(run("in memory: needed fields read only", &mut |(
        _,
        _,
        text,
    )| {
        Ok(!pipeline::scan::object_subset(text, &keys)?.is_empty())
    })?);
    let docs: Vec<Value> = rows
        .iter()
        .map(|(candid, object_id, text)| {
            let part = pipeline::scan::object_subset(text, &keys).unwrap_or_default();
            preview::alert_document(object_id, *candid, "", Value::Object(part))
        })
        .collect();
    let cpu = cpu_seconds();
    let started = Instant::now();
    let matched = docs.iter().filter(|d| p.passes(d)).count() as u64;
    let rate = Rate::new(
        "in memory: eval only",
        n,
        matched,
        started.elapsed(),
        cpu_seconds() - cpu,
    );
    eprintln!("filters: eval only: {rate:?}");
    out.push(rate);
    Ok(out)
}

/// Run the filters phase.
pub async fn run(args: FiltersArgs) -> anyhow::Result<Vec<DbFigures>> {
    let mut out = Vec::new();
    std::fs::create_dir_all(&args.work_dir)?;
    let file = args.work_dir.join("filters-bench.db");
    let remove = || {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", file.display()));
        }
    };
    if !args.skip_sqlite {
        if !args.reuse {
            remove();
        }
        let url = file.display().to_string();
        let mut figures =
            one_database(&args, &url, "unused", "sqlite", args.alerts, args.reuse).await?;
        figures.rates.extend(evaluation_only(&args, &url).await?);
        out.push(figures);
        if !args.keep {
            remove();
        }
    }
    if args.postgres_url != "none" {
        let schema = format!("bench_filters_{}", std::process::id());
        let result = one_database(
            &args,
            &args.postgres_url,
            &schema,
            "postgres",
            args.postgres_alerts,
            false,
        )
        .await;
        let pool = sqlx::PgPool::connect(&args.postgres_url).await?;
        sqlx::query(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
            .execute(&pool)
            .await?;
        out.push(result?);
    }
    println!(
        "{:<10} {:<42} {:>9} {:>8} {:>8} {:>8} {:>8} {:>11} {:>11} {:>11}",
        "database",
        "what",
        "evaluated",
        "matched",
        "wall s",
        "cpu s",
        "server s",
        "alerts/s",
        "per core/s",
        "core+srv/s"
    );
    for f in &out {
        for r in &f.rates {
            println!(
                "{:<10} {:<42} {:>9} {:>8} {:>8.2} {:>8.2} {:>8.2} {:>11.0} {:>11.0} {:>11.0}",
                f.database,
                r.what,
                r.evaluated,
                r.matched,
                r.wall_s,
                r.cpu_s,
                r.server_cpu_s,
                r.per_s,
                r.per_core_s,
                r.per_core_all_s
            );
        }
    }
    for f in &out {
        if let Some(d) = f.disk {
            let (with_cuts, without) = d.per_alert(f.alerts);
            println!(
                "{}: {} alerts, {:.1} MB on disk: {with_cuts:.0} B per alert, of which the compact record {:.0} B ({without:.0} B without it)",
                f.database,
                f.alerts,
                d.total_bytes as f64 / 1e6,
                with_cuts - without
            );
        }
    }
    let report = args.work_dir.join("report.json");
    std::fs::write(&report, serde_json::to_string_pretty(&out)?)?;
    println!("report: {}", report.display());
    Ok(out)
}
