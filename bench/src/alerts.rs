//! The alerts phase: an archive of clones of the real ZTF packets (new
//! candids and objectIds, positions spread uniformly over the sky, times
//! shifted), ingested through the broker's own ingest (Avro containers
//! decoded with their writer schema, HEALPix-indexed, one transaction per
//! container) into SQLite and PostgreSQL; then 5″ cone searches with a
//! 30-day window and crossmatches against the reference catalogs, timed one
//! by one.
//!
//! Clones drop the three cutouts (and, for the large archive, the history)
//! so that a million alerts fit the disk of a small machine: the cone search
//! reads the index and the trimmed row, never the packet, so it costs the
//! same either way; ingest throughput is measured for both kinds of clone.
//! Generating a container is not timed; ingesting it is.

use anyhow::Context;
use apache_avro::types::Value;
use apache_avro::{Reader, Schema, Writer};
use ithaca_broker::alerts::service::{AlertQuery, AlertsConfig};
use ithaca_broker::catalogs::service::CrossmatchQuery;
use ithaca_kit::principal::{InternalKey, Principal, VerifiedKey};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What the alerts phase does.
#[derive(Debug, Clone, clap::Args)]
pub struct AlertsArgs {
    /// Alerts in the archive the cone searches run over (history dropped).
    #[arg(long, default_value_t = 1_000_000)]
    pub alerts: u64,
    /// Clones with their full history (cutouts dropped) ingested first, to
    /// measure ingest of whole packets.
    #[arg(long, default_value_t = 20_000)]
    pub full_alerts: u64,
    /// Alerts per Avro container.
    #[arg(long, default_value_t = 1000)]
    pub per_file: usize,
    /// Cone searches and crossmatches timed.
    #[arg(long, default_value_t = 1000)]
    pub queries: usize,
    /// The real packets to clone (`../shared/data/ztf/alerts`).
    #[arg(long, default_value = "../shared/data/ztf/alerts")]
    pub data: PathBuf,
    /// The catalogs for the crossmatch (`../shared/data/catalogs`).
    #[arg(long, default_value = "../shared/data/catalogs")]
    pub catalogs: PathBuf,
    /// Where the SQLite archive goes (deleted afterwards unless --keep).
    #[arg(long, default_value = "target/ithaca-bench/alerts")]
    pub work_dir: PathBuf,
    /// PostgreSQL; a fresh schema is created and dropped. `none` skips it.
    #[arg(
        long,
        env = "ITHACA_BENCH_POSTGRES_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/test"
    )]
    pub postgres_url: String,
    /// Alerts in the PostgreSQL archive (default: --alerts).
    #[arg(long)]
    pub postgres_alerts: Option<u64>,
    /// Keep the SQLite file.
    #[arg(long)]
    pub keep: bool,
    /// Reuse the SQLite archive a `--keep` run left (time the queries only).
    #[arg(long)]
    pub reuse: bool,
    /// Skip SQLite (PostgreSQL only).
    #[arg(long)]
    pub skip_sqlite: bool,
}

/// A real packet to clone, with its writer schema.
struct Template {
    schema: usize,
    value: Value,
}

/// splitmix64: a small deterministic generator, so runs are repeatable.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Where and when one generated alert is, for the queries.
#[derive(Clone, Copy)]
pub(crate) struct Placed {
    ra: f64,
    dec: f64,
    jd: f64,
}

fn load_templates(dir: &Path) -> anyhow::Result<(Vec<Schema>, Vec<Template>)> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let p = e?.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "avro") {
                files.push(p);
            }
        }
    }
    files.sort();
    let (mut schemas, mut templates) = (Vec::<Schema>::new(), Vec::new());
    for f in files {
        let bytes = std::fs::read(&f)?;
        let reader = Reader::new(&bytes[..])?;
        let schema = reader.writer_schema().clone();
        let index = match schemas
            .iter()
            .position(|s| s.canonical_form() == schema.canonical_form())
        {
            Some(i) => i,
            None => {
                schemas.push(schema);
                schemas.len() - 1
            }
        };
        for v in reader {
            templates.push(Template {
                schema: index,
                value: v?,
            });
        }
    }
    anyhow::ensure!(!templates.is_empty(), "no alerts under {}", dir.display());
    Ok((schemas, templates))
}

/// The branch index of `null` in the union that field `name` of `schema` has.
fn null_branch(schema: &Schema, name: &str) -> Option<u32> {
    let Schema::Record(r) = schema else {
        return None;
    };
    let f = r.fields.iter().find(|f| f.name == name)?;
    let Schema::Union(u) = &f.schema else {
        return None;
    };
    u.variants()
        .iter()
        .position(|v| matches!(v, Schema::Null))
        .map(|i| i as u32)
}

fn set(fields: &mut [(String, Value)], name: &str, value: Value) {
    if let Some((_, v)) = fields.iter_mut().find(|(k, _)| k == name) {
        *v = match v {
            Value::Union(i, _) => Value::Union(*i, Box::new(value)),
            _ => value,
        };
    }
}

fn shift_jd(v: &mut Value, days: f64) {
    match v {
        Value::Union(_, inner) => shift_jd(inner, days),
        Value::Array(items) => items.iter_mut().for_each(|i| shift_jd(i, days)),
        Value::Record(fields) => {
            for (k, f) in fields.iter_mut() {
                if k == "jd" || k == "jdstarthist" || k == "jdendhist" {
                    if let Value::Double(d) = f {
                        *d += days;
                    } else if let Value::Union(_, inner) = f
                        && let Value::Double(d) = inner.as_mut()
                    {
                        *d += days;
                    }
                }
            }
        }
        _ => {}
    }
}

/// Clone `t` as alert number `n`: new ids, position, times; no cutouts and,
/// without `history`, no prv_candidates or fp_hists.
fn clone_alert(t: &Template, schema: &Schema, n: u64, place: Placed, history: bool) -> Value {
    let mut value = t.value.clone();
    let Value::Record(fields) = &mut value else {
        return value;
    };
    let candid = 3_000_000_000_000_000_000 + n as i64;
    // Four alerts per object, a few days apart, at one position.
    let object = format!("ZTF90{:07}", n / 4);
    let mut jd_shift = 0.0;
    for (k, v) in fields.iter_mut() {
        if k == "candidate" {
            let inner = match v {
                Value::Union(_, b) => b.as_mut(),
                other => other,
            };
            if let Value::Record(c) = inner {
                let old_jd = c.iter().find_map(|(k, v)| match (k.as_str(), v) {
                    ("jd", Value::Double(d)) => Some(*d),
                    _ => None,
                });
                jd_shift = old_jd.map_or(0.0, |j| place.jd - j);
                set(c, "candid", Value::Long(candid));
                set(c, "ra", Value::Double(place.ra));
                set(c, "dec", Value::Double(place.dec));
            }
        }
    }
    for (k, v) in fields.iter_mut() {
        if k == "candidate" || k == "prv_candidates" || k == "fp_hists" {
            shift_jd(v, jd_shift);
        }
    }
    set(fields, "candid", Value::Long(candid));
    set(fields, "objectId", Value::String(object));
    let mut drop: Vec<&str> = vec!["cutoutScience", "cutoutTemplate", "cutoutDifference"];
    if !history {
        drop.extend(["prv_candidates", "fp_hists"]);
    }
    for name in drop {
        if let Some(i) = null_branch(schema, name)
            && let Some((_, v)) = fields.iter_mut().find(|(k, _)| k == name)
        {
            *v = Value::Union(i, Box::new(Value::Null));
        }
    }
    value
}

/// Figures of one database.
#[derive(Debug, Default, serde::Serialize)]
pub struct DbFigures {
    pub database: String,
    pub full_alerts: u64,
    pub full_ingest_per_s: f64,
    /// The archive holding only the whole clones.
    pub full_disk: Option<crate::disk::Disk>,
    /// The archive at the end (whole clones and the large archive).
    pub disk: Option<crate::disk::Disk>,
    pub alerts: u64,
    pub ingest_per_s: f64,
    pub cone_p50_ms: f64,
    pub cone_p99_ms: f64,
    pub cone_found_share: f64,
    pub crossmatch_p50_ms: f64,
    pub crossmatch_p99_ms: f64,
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

pub(crate) struct Generator {
    schemas: Vec<Schema>,
    templates: Vec<Template>,
    rng: Rng,
    next: u64,
}

impl Generator {
    /// Clones of the real packets under `dir`, repeatable (a fixed seed);
    /// the filters phase generates its archive with this too.
    pub(crate) fn new(dir: &Path) -> anyhow::Result<Generator> {
        let (schemas, templates) = load_templates(dir)?;
        Ok(Generator {
            schemas,
            templates,
            rng: Rng(0x1234_5678),
            next: 0,
        })
    }

    /// A container of up to `count` clones from templates of one schema,
    /// and where each clone is.
    pub(crate) fn container(
        &mut self,
        count: usize,
        history: bool,
    ) -> anyhow::Result<(Vec<u8>, Vec<Placed>)> {
        let schema_index = (self.next / count.max(1) as u64) as usize % self.schemas.len();
        let schema = &self.schemas[schema_index];
        let of_schema: Vec<&Template> = self
            .templates
            .iter()
            .filter(|t| t.schema == schema_index)
            .collect();
        let mut writer = Writer::new(schema, Vec::new());
        let mut placed = Vec::with_capacity(count);
        let mut place = Placed {
            ra: 0.0,
            dec: 0.0,
            jd: 0.0,
        };
        for k in 0..count {
            let n = self.next + k as u64;
            if n.is_multiple_of(4) {
                // Uniform over the sphere; times over the survey's years.
                place = Placed {
                    ra: 360.0 * self.rng.unit(),
                    dec: (2.0 * self.rng.unit() - 1.0).asin().to_degrees(),
                    jd: 2_458_200.0 + 2_500.0 * self.rng.unit(),
                };
            } else {
                place.jd += 1.0 + 3.0 * self.rng.unit();
            }
            let t = of_schema[(n as usize) % of_schema.len()];
            writer.append(clone_alert(t, schema, n, place, history))?;
            placed.push(place);
        }
        self.next += count as u64;
        Ok((writer.into_inner()?, placed))
    }
}

async fn one_database(
    args: &AlertsArgs,
    db_url: &str,
    schema: &str,
    label: &str,
    alerts: u64,
    reuse: bool,
) -> anyhow::Result<DbFigures> {
    let key = InternalKey::new(b"bench-alerts-internal-key-0123456789abcdef".to_vec())?;
    let db = ithaca_broker::open_db(db_url, schema).await?;
    let (service, catalogs) = ithaca_broker::astro(db.clone(), &key, AlertsConfig::default());
    let admin = Principal::system("");
    let reader = Principal::verified(VerifiedKey {
        tenant_id: "bench".into(),
        key_id: "bench".into(),
        scopes: vec!["data:read".into()],
        human: false,
    });
    let (schemas, templates) = load_templates(&args.data)?;
    let mut generator = Generator {
        schemas,
        templates,
        rng: Rng(0x1234_5678),
        next: 0,
    };
    let mut figures = DbFigures {
        database: label.to_owned(),
        ..Default::default()
    };

    let mut sample = Vec::new();
    let mut rng = Rng(0xfeed);
    if reuse {
        // Stored alerts spread through the archive stand in for the
        // positions the generator would have returned.
        let pool = sqlx::SqlitePool::connect(db_url).await?;
        let total: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM alerts")
            .fetch_one(&pool)
            .await?;
        let step = (total / args.queries.max(1) as i64).max(1);
        let rows: Vec<(f64, f64, f64)> =
            sqlx::query_as("SELECT ra, dec, jd FROM alerts WHERE rowid % $1 = 0 LIMIT $2")
                .bind(step)
                .bind(args.queries as i64)
                .fetch_all(&pool)
                .await?;
        sample = rows
            .into_iter()
            .map(|(ra, dec, jd)| Placed { ra, dec, jd })
            .collect();
        figures.alerts = u64::try_from(total).unwrap_or_default();
        eprintln!("alerts[{label}]: reusing {total} stored alerts");
    } else {
        // Whole packets (less cutouts).
        let mut spent = Duration::ZERO;
        let mut done = 0;
        while done < args.full_alerts {
            let count = args.per_file.min((args.full_alerts - done) as usize);
            let (bytes, _) = generator.container(count, true)?;
            let started = Instant::now();
            service
                .ingest_file(&admin, "", &format!("full-{done}.avro"), bytes)
                .await?;
            spent += started.elapsed();
            done += count as u64;
        }
        figures.full_alerts = done;
        figures.full_ingest_per_s = done as f64 / spent.as_secs_f64().max(1e-9);
        if done > 0 {
            figures.full_disk = Some(crate::disk::measure(&db).await?);
        }
        eprintln!(
            "alerts[{label}]: {done} whole clones at {:.0} alerts/s",
            figures.full_ingest_per_s
        );

        // The large archive.
        let mut spent = Duration::ZERO;
        let mut done = 0;
        let every = (alerts / args.queries.max(1) as u64).max(1);
        while done < alerts {
            let count = args.per_file.min((alerts - done) as usize);
            let (bytes, placed) = generator.container(count, false)?;
            for (i, p) in placed.iter().enumerate() {
                if (done + i as u64).is_multiple_of(every) {
                    sample.push(*p);
                }
            }
            let started = Instant::now();
            service
                .ingest_file(&admin, "", &format!("archive-{done}.avro"), bytes)
                .await?;
            spent += started.elapsed();
            done += count as u64;
            if done % 100_000 < count as u64 {
                eprintln!(
                    "alerts[{label}]: {done}/{alerts} at {:.0} alerts/s",
                    done as f64 / spent.as_secs_f64()
                );
            }
        }
        figures.alerts = done;
        figures.ingest_per_s = done as f64 / spent.as_secs_f64().max(1e-9);
    }

    // 5″ cones with a 30-day window around stored alerts.
    let mut times = Vec::with_capacity(sample.len());
    let mut found = 0usize;
    for p in sample.iter().take(args.queries) {
        let q = AlertQuery {
            broker_id: "ztf-archive".into(),
            ra: Some(p.ra),
            dec: Some(p.dec),
            radius_arcsec: Some(5.0),
            jd_start: Some(p.jd - 15.0),
            jd_end: Some(p.jd + 15.0),
            ..Default::default()
        };
        let started = Instant::now();
        let answer = service.alerts(&reader, q).await?;
        times.push(started.elapsed());
        if !answer.alerts.is_empty() {
            found += 1;
        }
    }
    times.sort();
    figures.cone_p50_ms = percentile(&times, 0.50);
    figures.cone_p99_ms = percentile(&times, 0.99);
    figures.cone_found_share = found as f64 / times.len().max(1) as f64;

    // Crossmatch: random positions, 60″, both catalogs.
    for name in ["hipparcos2_hp_le_6.0.csv", "openngc_galaxies_z_le_0.01.csv"] {
        let bytes =
            std::fs::read(args.catalogs.join(name)).with_context(|| format!("reading {name}"))?;
        catalogs.ingest(&admin, name, &bytes).await?;
    }
    let mut times = Vec::with_capacity(args.queries);
    for _ in 0..args.queries {
        let q = CrossmatchQuery {
            broker_id: "ztf-archive".into(),
            ra: Some(360.0 * rng.unit()),
            dec: Some((2.0 * rng.unit() - 1.0).asin().to_degrees()),
            radius_arcsec: Some(60.0),
            epoch_jd: Some(2_460_000.5),
            ..Default::default()
        };
        let started = Instant::now();
        catalogs.crossmatch(&reader, q).await?;
        times.push(started.elapsed());
    }
    times.sort();
    figures.crossmatch_p50_ms = percentile(&times, 0.50);
    figures.crossmatch_p99_ms = percentile(&times, 0.99);
    figures.disk = Some(crate::disk::measure(&db).await?);
    eprintln!("alerts[{label}]: {figures:?}");
    Ok(figures)
}

/// Run the alerts phase on SQLite and, unless `none`, PostgreSQL.
pub async fn run(args: AlertsArgs) -> anyhow::Result<Vec<DbFigures>> {
    let mut out = Vec::new();
    std::fs::create_dir_all(&args.work_dir)?;
    let file = args.work_dir.join("alerts-bench.db");
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
        let figures =
            one_database(&args, &url, "unused", "sqlite", args.alerts, args.reuse).await?;
        out.push(figures);
        if !args.keep {
            remove();
        }
    }
    if args.postgres_url != "none" {
        let schema = format!("bench_alerts_{}", std::process::id());
        let alerts = args.postgres_alerts.unwrap_or(args.alerts);
        let result = one_database(
            &args,
            &args.postgres_url,
            &schema,
            "postgres",
            alerts,
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
        "{:<10} {:>9} {:>12} {:>10} {:>12} {:>10} {:>10} {:>8} {:>10} {:>10}",
        "database",
        "whole",
        "whole/s",
        "archive",
        "archive/s",
        "cone p50",
        "cone p99",
        "found",
        "xmatch p50",
        "xmatch p99"
    );
    for f in &out {
        println!(
            "{:<10} {:>9} {:>12.0} {:>10} {:>12.0} {:>8.2}ms {:>8.2}ms {:>7.0}% {:>8.2}ms {:>8.2}ms",
            f.database,
            f.full_alerts,
            f.full_ingest_per_s,
            f.alerts,
            f.ingest_per_s,
            f.cone_p50_ms,
            f.cone_p99_ms,
            f.cone_found_share * 100.0,
            f.crossmatch_p50_ms,
            f.crossmatch_p99_ms
        );
    }
    for f in &out {
        let lines = [
            (
                "whole clones (history, no cutouts)",
                f.full_disk,
                f.full_alerts,
            ),
            ("whole clones and archive", f.disk, f.full_alerts + f.alerts),
        ];
        for (what, disk, alerts) in lines {
            if let Some(d) = disk {
                let (with_cuts, without) = d.per_alert(alerts);
                println!(
                    "{}: disk, {what}: {alerts} alerts, {:.1} MB: {with_cuts:.0} B per alert, \
                     of which the compact record {:.0} B ({without:.0} B without it)",
                    f.database,
                    d.total_bytes as f64 / 1e6,
                    with_cuts - without
                );
            }
        }
    }
    let report = args.work_dir.join("report.json");
    std::fs::write(&report, serde_json::to_string_pretty(&out)?)?;
    println!("report: {}", report.display());
    Ok(out)
}
