//! `alert_cuts`, the compact filter records ([`super::cuts`]): written with
//! each ingest, and backfilled for an archive stored before the table
//! existed, resumably and with progress.

use super::cuts::{Cut, Cuts};
use super::store::{AlertStore, NewAlert};
use crate::progress::{Progress, report};
use ithaca_kit::clock;
use ithaca_kit::with_pool;
use std::time::{Duration, Instant};

/// Records per INSERT statement (22 parameters each).
pub(crate) const CUTS_BATCH: usize = 500;
/// Alerts a backfill step reads, records and commits at once.
pub const BACKFILL_BATCH: usize = 2000;
/// The backfill's row in `archive_backfills`.
const BACKFILL: &str = "alert_cuts";

pub(crate) const INSERT_CUTS: &str = "INSERT INTO alert_cuts (broker_id, candid, object_id, schemavsn, hpx, present, \
     jd, fid, programid, isdiffpos, drb, rb, nbad, fwhm, elong, magpsf, sigmapsf, ndethist, ssdistnr, \
     sgscore1, distpsnr1, jdstarthist) ";

/// One row of `alert_cuts` to write.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CutsRow<'a> {
    pub broker_id: &'a str,
    pub candid: i64,
    pub object_id: &'a str,
    pub schemavsn: &'a str,
    pub hpx: i64,
    pub jd: f64,
    pub cuts: &'a Cuts,
}

impl<'a> CutsRow<'a> {
    pub fn of(a: &'a NewAlert) -> Self {
        CutsRow {
            broker_id: &a.row.broker_id,
            candid: a.row.candid,
            object_id: &a.row.object_id,
            schemavsn: &a.row.schemavsn,
            hpx: a.row.hpx,
            jd: a.row.jd,
            cuts: &a.cuts,
        }
    }

    /// Field `i`'s column value, typed as its column.
    pub fn int(&self, i: usize) -> Option<i64> {
        match self.cuts.values.get(i) {
            Some(Cut::Int(v)) => Some(*v),
            _ => None,
        }
    }

    pub fn real(&self, i: usize) -> Option<f64> {
        match self.cuts.values.get(i) {
            Some(Cut::Real(v)) => Some(*v),
            _ => None,
        }
    }

    pub fn text(&self, i: usize) -> Option<&'a str> {
        match self.cuts.values.get(i) {
            Some(Cut::Text(v)) => Some(v.as_str()),
            _ => None,
        }
    }
}

/// Insert `rows` (a slice of [`CutsRow`]) through the executor expression
/// `exec` (re-evaluated per statement, e.g. `&mut *tx`), skipping alerts
/// that have a record. A macro because the two backends' executors and
/// argument types differ; it expands inside `with_pool!`.
macro_rules! insert_cuts {
    ($exec:expr, $rows:expr) => {{
        let rows: &[$crate::alerts::cuts_store::CutsRow<'_>] = $rows;
        for chunk in rows.chunks($crate::alerts::cuts_store::CUTS_BATCH) {
            let mut b = sqlx::QueryBuilder::new($crate::alerts::cuts_store::INSERT_CUTS);
            b.push_values(chunk, |mut b, r| {
                b.push_bind(r.broker_id)
                    .push_bind(r.candid)
                    .push_bind(r.object_id)
                    .push_bind(r.schemavsn)
                    .push_bind(r.hpx)
                    .push_bind(r.cuts.present)
                    .push_bind(r.jd);
                // Field 0 is `jd`, bound above.
                for (i, (_, kind)) in $crate::alerts::cuts::FIELDS.iter().enumerate().skip(1) {
                    match kind {
                        $crate::alerts::cuts::Kind::Int => b.push_bind(r.int(i)),
                        $crate::alerts::cuts::Kind::Real => b.push_bind(r.real(i)),
                        $crate::alerts::cuts::Kind::Text => b.push_bind(r.text(i)),
                    };
                }
            });
            b.push(" ON CONFLICT (broker_id, candid) DO NOTHING");
            b.build().execute($exec).await?;
        }
    }};
}
pub(crate) use insert_cuts;

/// Where a backfill stands.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Backfill {
    /// Every alert has its record.
    pub done: bool,
    /// Alerts read by this run.
    pub read: u64,
    /// Alerts of the archive, and how many had a record when this run
    /// last looked (the progress it reported).
    pub total: u64,
    pub recorded: u64,
}

/// An alert read for the backfill.
#[derive(sqlx::FromRow)]
struct Pending {
    broker_id: String,
    candid: i64,
    object_id: String,
    schemavsn: String,
    hpx: i64,
    jd: f64,
    candidate: String,
}

impl AlertStore {
    /// Whether every alert has its filter record (the preview reads the
    /// records only then).
    pub async fn cuts_ready(&self) -> Result<bool, sqlx::Error> {
        let sql = "SELECT done FROM archive_backfills WHERE name = $1";
        let done = with_pool!(self.db(), pool => sqlx::query_scalar::<_, i64>(sql)
            .bind(BACKFILL)
            .fetch_optional(pool)
            .await)?;
        Ok(done == Some(1))
    }

    /// Whether an alert of `broker_id` has a record that cannot carry its
    /// candidate (read from the candidate instead).
    pub async fn has_spilled_cuts(&self, broker_id: &str) -> Result<bool, sqlx::Error> {
        let sql = "SELECT candid FROM alert_cuts WHERE broker_id = $1 AND present < 0 LIMIT 1";
        let found = with_pool!(self.db(), pool => sqlx::query_scalar::<_, i64>(sql)
            .bind(broker_id)
            .fetch_optional(pool)
            .await)?;
        Ok(found.is_some())
    }

    /// Write the filter records of alerts stored before `alert_cuts`
    /// existed, `batch` alerts per transaction ([`BACKFILL_BATCH`] when the
    /// service runs it), in (broker, candid) order from where the last run
    /// stopped: stopping at any point loses nothing. Stops after
    /// `max_batches` when given. Reports records written of alerts to
    /// `progress`.
    pub async fn backfill_cuts(
        &self,
        batch: usize,
        max_batches: Option<usize>,
        progress: Option<&Progress>,
    ) -> Result<Backfill, sqlx::Error> {
        let db = self.db();
        let mut state = Backfill {
            total: count(self, "SELECT COUNT(*) FROM alerts").await?,
            recorded: count(self, "SELECT COUNT(*) FROM alert_cuts").await?,
            ..Backfill::default()
        };
        let mut batches = 0usize;
        loop {
            let cursor = "SELECT cursor_broker_id, cursor_candid, done FROM archive_backfills WHERE name = $1";
            let (broker_id, candid, done) = with_pool!(db, pool =>
                sqlx::query_as::<_, (String, i64, i64)>(cursor)
                    .bind(BACKFILL)
                    .fetch_one(pool)
                    .await)?;
            if done == 1 {
                state.done = true;
                return Ok(state);
            }
            if max_batches.is_some_and(|m| batches >= m) {
                return Ok(state);
            }
            batches += 1;
            let read = "SELECT broker_id, candid, object_id, schemavsn, hpx, jd, candidate FROM alerts \
                        WHERE (broker_id, candid) > ($1, $2) ORDER BY broker_id, candid LIMIT $3";
            let pending = with_pool!(db, pool => sqlx::query_as::<_, Pending>(read)
                .bind(&broker_id)
                .bind(candid)
                .bind(i64::try_from(batch.max(1)).unwrap_or(i64::MAX))
                .fetch_all(pool)
                .await)?;
            let cuts: Vec<Cuts> = pending
                .iter()
                .map(|p| {
                    serde_json::from_str(&p.candidate)
                        .map(|c| Cuts::of(&c))
                        .unwrap_or_else(|_| Cuts::of(&serde_json::Value::Null))
                })
                .collect();
            let rows: Vec<CutsRow<'_>> = pending
                .iter()
                .zip(&cuts)
                .map(|(p, cuts)| CutsRow {
                    broker_id: &p.broker_id,
                    candid: p.candid,
                    object_id: &p.object_id,
                    schemavsn: &p.schemavsn,
                    hpx: p.hpx,
                    jd: p.jd,
                    cuts,
                })
                .collect();
            let (next_broker, next_candid, finished) = match pending.last() {
                Some(p) => (p.broker_id.as_str(), p.candid, 0i64),
                None => (broker_id.as_str(), candid, 1i64),
            };
            let advance = "UPDATE archive_backfills SET cursor_broker_id = $1, cursor_candid = $2, done = $3, \
                           updated_at_ms = $4 WHERE name = $5";
            let _gate = db.write_gate().await;
            with_pool!(db, pool => {
                let mut tx = pool.begin().await?;
                insert_cuts!(&mut *tx, &rows);
                sqlx::query(advance)
                    .bind(next_broker)
                    .bind(next_candid)
                    .bind(finished)
                    .bind(clock::now_ms())
                    .bind(BACKFILL)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
            });
            if !pending.is_empty() {
                state.read += pending.len() as u64;
                state.recorded = (state.recorded + pending.len() as u64).min(state.total);
                report(progress, state.recorded, state.total);
            }
        }
    }

    /// Run the backfill on a task of its own if it is not done, logging its
    /// progress every few seconds; a failure is logged and retried a few
    /// times, and a later start resumes where it stopped.
    pub fn spawn_cuts_backfill(&self) {
        let store = self.clone();
        tokio::spawn(async move {
            match store.cuts_ready().await {
                Ok(true) => return,
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "alert archive: cannot read the filter records' backfill state");
                    return;
                }
            }
            tracing::info!(
                "alert archive: writing the filter records of stored alerts (resumable)"
            );
            let started = Instant::now();
            let (tx, mut rx) = tokio::sync::mpsc::channel::<(u64, u64)>(16);
            let logger = tokio::spawn(async move {
                let mut last = Instant::now();
                while let Some((done, total)) = rx.recv().await {
                    if last.elapsed() >= Duration::from_secs(5) {
                        last = Instant::now();
                        tracing::info!(done, total, "alert archive: filter records written");
                    }
                }
            });
            for attempt in 1..=5u32 {
                match store.backfill_cuts(BACKFILL_BATCH, None, Some(&tx)).await {
                    Ok(state) => {
                        tracing::info!(
                            alerts = state.total,
                            read = state.read,
                            seconds = started.elapsed().as_secs_f64(),
                            "alert archive: every alert has its filter record"
                        );
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, attempt, "alert archive: filter record backfill failed; retrying");
                        tokio::time::sleep(Duration::from_secs(10 * u64::from(attempt))).await;
                    }
                }
            }
            drop(tx);
            let _ = logger.await;
        });
    }
}

async fn count(store: &AlertStore, sql: &str) -> Result<u64, sqlx::Error> {
    let n =
        with_pool!(store.db(), pool => sqlx::query_scalar::<_, i64>(sql).fetch_one(pool).await)?;
    Ok(u64::try_from(n).unwrap_or(0))
}
