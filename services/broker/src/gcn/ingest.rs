//! Ingest: one file per transaction. Circulars are attached to events by the
//! names they mention ([`super::identify`]); notices by their trigger ids,
//! else by time (and position) among gamma-ray and X-ray triggers. New names
//! become aliases, and circulars that named nothing known until then join
//! the event that takes one of their names.
//!
//! The algorithm is written once over [`IngestTx`], whose SQL is written
//! once and instantiated for SQLite and PostgreSQL transactions.

use super::extract::{self, ORIGIN};
use super::identify::{self, CircularNames};
use super::model::{DateObs, EventKind, LocOrigin, Name, separation_deg};
use super::parse::{Circular, Notice};
use super::skymap::SkyMap;
use super::store::{EVENT_COLUMNS, EventRow, ExtractionRow, LOCALISATION_COLUMNS, LocalisationRow};
use ithaca_kit::error::ServiceError;
use std::collections::HashMap;
use std::future::Future;

/// Triggers of different missions this close in time are one event (when
/// their positions agree). SVOM's ECLAIRs and Fermi's GBM saw the burst of
/// 2026-04-21 3.2 s apart.
pub const TIME_WINDOW_MS: i64 = 10_000;

/// Allowance added to the two error radii when checking that positions
/// agree: coarse gamma-ray localisations (GBM's) carry systematic errors of
/// several degrees beyond their statistical radius.
pub const POSITION_SLACK_DEG: f64 = 5.0;

/// The coincidence window between a gravitational-wave candidate and a
/// gamma-ray (or X-ray) burst on the same trigger: the burst from 1 s
/// before to 5 s after the merger time, the window LVK's own GRB
/// coincidence search uses for prompt emission. GRB 170817A followed
/// GW170817 by 1.7 s. Both events must have exact times (from a notice or
/// a circular's stated trigger time); a circular's date alone never merges.
pub const GW_BURST_BEFORE_MS: i64 = 1_000;
pub const GW_BURST_AFTER_MS: i64 = 5_000;

/// Who the built-in rows are created by.
const SYSTEM: &str = "ithaca";

/// How many circulars pass between two progress reports.
const PROGRESS_EVERY: usize = 100;

pub use crate::progress::{Progress, report};

/// What one file's ingest did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    /// Circulars or notices the file holds.
    pub items: i64,
    /// Newly stored.
    pub stored: i64,
    /// Circulars stored before whose text changed (re-read, re-extracted).
    pub updated: i64,
    /// Already stored, identical.
    pub unchanged: i64,
    /// Circulars of this file that name no known event after it (kept, and
    /// attached when an event takes a name they mention).
    pub unattached: i64,
    /// Circulars stored unattached (by this file or an earlier one) that
    /// joined an event because it took a name they mention.
    pub attached: i64,
    /// Events created, canonical dateobs.
    pub events_created: Vec<String>,
    /// Every event the file added to, canonical dateobs, in order.
    pub events: Vec<String>,
    /// New aliases.
    pub aliases_added: i64,
    /// New extractions of the built-in parser.
    pub extractions: i64,
}

impl Outcome {
    fn touched(&mut self, dateobs: &str) {
        if !self.events.iter().any(|e| e == dateobs) {
            self.events.push(dateobs.to_owned());
        }
    }
}

type Res<T> = Result<T, sqlx::Error>;

/// The statements ingest runs inside its transaction.
pub trait IngestTx: Send {
    /// Serialise ingests (PostgreSQL: an advisory lock; SQLite's writers are
    /// queued by the caller).
    fn lock(&mut self) -> impl Future<Output = Res<()>> + Send;
    fn file_seen(&mut self, checksum: &str) -> impl Future<Output = Res<bool>> + Send;
    fn alias(&mut self, key: &str) -> impl Future<Output = Res<Option<String>>> + Send;
    fn event_exists(&mut self, dateobs: &str) -> impl Future<Output = Res<bool>> + Send;
    /// `(dateobs, ms, kind)` of events whose time is exact and within `lo..=hi`.
    fn events_between(
        &mut self,
        lo: i64,
        hi: i64,
    ) -> impl Future<Output = Res<Vec<(String, i64, String)>>> + Send;
    /// `(ra, dec, radius)` of an event's localisations.
    fn circles(&mut self, dateobs: &str) -> impl Future<Output = Res<Vec<(f64, f64, f64)>>> + Send;
    /// `(checksum, dateobs)` of a stored circular.
    fn circular(
        &mut self,
        id: i64,
    ) -> impl Future<Output = Res<Option<(String, Option<String>)>>> + Send;
    /// The distinct events the given circulars are attached to.
    fn cited_events(&mut self, ids: &[i64]) -> impl Future<Output = Res<Vec<String>>> + Send;
    fn notice_seen(&mut self, key: &str) -> impl Future<Output = Res<bool>> + Send;
    fn insert_event(&mut self, row: &EventRow) -> impl Future<Output = Res<()>> + Send;
    /// False when the alias belongs to an event already.
    fn insert_alias(
        &mut self,
        key: &str,
        alias: &str,
        dateobs: &str,
        from: &str,
        now: i64,
    ) -> impl Future<Output = Res<bool>> + Send;
    fn insert_circular(
        &mut self,
        c: &Circular,
        dateobs: Option<&str>,
        now: i64,
    ) -> impl Future<Output = Res<()>> + Send;
    fn update_circular(&mut self, c: &Circular, now: i64) -> impl Future<Output = Res<()>> + Send;
    fn insert_mention(&mut self, key: &str, id: i64) -> impl Future<Output = Res<()>> + Send;
    /// Built-in extractions (a second copy of a key is ignored); rows added.
    fn insert_extractions(
        &mut self,
        rows: &[ExtractionRow],
    ) -> impl Future<Output = Res<u64>> + Send;
    fn insert_localisation(
        &mut self,
        row: &LocalisationRow,
    ) -> impl Future<Output = Res<()>> + Send;
    /// Drop what the built-in parser derived from a circular.
    fn clear_derived(&mut self, id: i64) -> impl Future<Output = Res<()>> + Send;
    /// Attach circulars that mention `key` and name no event to `dateobs`,
    /// with what was derived from them; how many.
    fn attach_mentioning(
        &mut self,
        key: &str,
        dateobs: &str,
    ) -> impl Future<Output = Res<u64>> + Send;
    fn insert_notice(
        &mut self,
        n: &Notice,
        dateobs: &str,
        source: &str,
        checksum: &str,
        now: i64,
    ) -> impl Future<Output = Res<()>> + Send;
    fn insert_file(
        &mut self,
        checksum: &str,
        source: &str,
        kind: &str,
        items: i64,
        now: i64,
    ) -> impl Future<Output = Res<()>> + Send;
}

/// The implementation for one database: the same SQL for both.
macro_rules! ingest_tx {
    ($db:ty, $lock:expr) => {
        impl IngestTx for sqlx::Transaction<'_, $db> {
            async fn lock(&mut self) -> Res<()> {
                let lock: Option<&str> = $lock;
                if let Some(sql) = lock {
                    sqlx::query(sql).execute(&mut **self).await?;
                }
                Ok(())
            }
            async fn file_seen(&mut self, checksum: &str) -> Res<bool> {
                let sql = "SELECT COUNT(*) FROM gcn_files WHERE checksum = $1";
                let n: i64 = sqlx::query_scalar(sql).bind(checksum).fetch_one(&mut **self).await?;
                Ok(n > 0)
            }
            async fn alias(&mut self, key: &str) -> Res<Option<String>> {
                let sql = "SELECT dateobs FROM gcn_aliases WHERE alias_key = $1";
                sqlx::query_scalar(sql).bind(key).fetch_optional(&mut **self).await
            }
            async fn event_exists(&mut self, dateobs: &str) -> Res<bool> {
                let sql = "SELECT COUNT(*) FROM gcn_events WHERE dateobs = $1";
                let n: i64 = sqlx::query_scalar(sql).bind(dateobs).fetch_one(&mut **self).await?;
                Ok(n > 0)
            }
            async fn events_between(&mut self, lo: i64, hi: i64) -> Res<Vec<(String, i64, String)>> {
                let sql = "SELECT dateobs, dateobs_ms, kind FROM gcn_events \
                           WHERE dateobs_ms BETWEEN $1 AND $2 AND time_exact = 1";
                sqlx::query_as(sql).bind(lo).bind(hi).fetch_all(&mut **self).await
            }
            async fn circles(&mut self, dateobs: &str) -> Res<Vec<(f64, f64, f64)>> {
                let sql = "SELECT ra, dec, error_radius_deg FROM gcn_localisations WHERE dateobs = $1";
                sqlx::query_as(sql).bind(dateobs).fetch_all(&mut **self).await
            }
            async fn circular(&mut self, id: i64) -> Res<Option<(String, Option<String>)>> {
                let sql = "SELECT checksum, dateobs FROM gcn_circulars WHERE circular_id = $1";
                sqlx::query_as(sql).bind(id).fetch_optional(&mut **self).await
            }
            async fn cited_events(&mut self, ids: &[i64]) -> Res<Vec<String>> {
                if ids.is_empty() {
                    return Ok(Vec::new());
                }
                let marks: Vec<String> = (1..=ids.len()).map(|i| format!("${i}")).collect();
                let sql = format!(
                    "SELECT DISTINCT dateobs FROM gcn_circulars WHERE dateobs IS NOT NULL AND circular_id IN ({})",
                    marks.join(", ")
                );
                let mut q = sqlx::query_scalar(&sql);
                for id in ids {
                    q = q.bind(*id);
                }
                q.fetch_all(&mut **self).await
            }
            async fn notice_seen(&mut self, key: &str) -> Res<bool> {
                let sql = "SELECT COUNT(*) FROM gcn_notices WHERE ivorn = $1";
                let n: i64 = sqlx::query_scalar(sql).bind(key).fetch_one(&mut **self).await?;
                Ok(n > 0)
            }
            async fn insert_event(&mut self, row: &EventRow) -> Res<()> {
                let sql = format!("INSERT INTO gcn_events ({EVENT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6)");
                sqlx::query(&sql)
                    .bind(&row.dateobs)
                    .bind(row.dateobs_ms)
                    .bind(&row.kind)
                    .bind(&row.dateobs_from)
                    .bind(row.time_exact)
                    .bind(row.created_at_ms)
                    .execute(&mut **self)
                    .await
                    .map(|_| ())
            }
            async fn insert_alias(&mut self, key: &str, alias: &str, dateobs: &str, from: &str, now: i64) -> Res<bool> {
                let sql = "INSERT INTO gcn_aliases (alias_key, alias, dateobs, added_from, created_at_ms) \
                           VALUES ($1, $2, $3, $4, $5) ON CONFLICT (alias_key) DO NOTHING";
                let r = sqlx::query(sql)
                    .bind(key)
                    .bind(alias)
                    .bind(dateobs)
                    .bind(from)
                    .bind(now)
                    .execute(&mut **self)
                    .await?;
                Ok(r.rows_affected() > 0)
            }
            async fn insert_circular(&mut self, c: &Circular, dateobs: Option<&str>, now: i64) -> Res<()> {
                let sql = "INSERT INTO gcn_circulars (circular_id, dateobs, subject, submitter, created_on_ms, body, \
                           event_id, bibcode, checksum, ingested_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)";
                sqlx::query(sql)
                    .bind(c.circular_id)
                    .bind(dateobs)
                    .bind(&c.subject)
                    .bind(&c.submitter)
                    .bind(c.created_on_ms)
                    .bind(&c.body)
                    .bind(&c.event_id)
                    .bind(&c.bibcode)
                    .bind(&c.checksum)
                    .bind(now)
                    .execute(&mut **self)
                    .await
                    .map(|_| ())
            }
            async fn update_circular(&mut self, c: &Circular, now: i64) -> Res<()> {
                let sql = "UPDATE gcn_circulars SET subject = $2, submitter = $3, created_on_ms = $4, body = $5, \
                           event_id = $6, bibcode = $7, checksum = $8, ingested_at_ms = $9 WHERE circular_id = $1";
                sqlx::query(sql)
                    .bind(c.circular_id)
                    .bind(&c.subject)
                    .bind(&c.submitter)
                    .bind(c.created_on_ms)
                    .bind(&c.body)
                    .bind(&c.event_id)
                    .bind(&c.bibcode)
                    .bind(&c.checksum)
                    .bind(now)
                    .execute(&mut **self)
                    .await
                    .map(|_| ())
            }
            async fn insert_mention(&mut self, key: &str, id: i64) -> Res<()> {
                let sql = "INSERT INTO gcn_mentions (alias_key, circular_id) VALUES ($1, $2) \
                           ON CONFLICT (alias_key, circular_id) DO NOTHING";
                sqlx::query(sql).bind(key).bind(id).execute(&mut **self).await.map(|_| ())
            }
            async fn insert_extractions(&mut self, rows: &[ExtractionRow]) -> Res<u64> {
                let mut added = 0;
                // 10 parameters a row; well under both databases' limits.
                for chunk in rows.chunks(100) {
                    let mut b = sqlx::QueryBuilder::new(format!(
                        "INSERT INTO gcn_extractions ({}) ",
                        super::store::EXTRACTION_COLUMNS
                    ));
                    b.push_values(chunk, |mut v, r| {
                        v.push_bind(&r.extraction_id)
                            .push_bind(&r.tenant_id)
                            .push_bind(&r.dateobs)
                            .push_bind(&r.origin)
                            .push_bind(&r.kind)
                            .push_bind(r.circular_id)
                            .push_bind(&r.producer_key)
                            .push_bind(&r.payload)
                            .push_bind(&r.created_by)
                            .push_bind(r.created_at_ms);
                    });
                    b.push(" ON CONFLICT (tenant_id, origin, producer_key) DO NOTHING");
                    added += b.build().execute(&mut **self).await?.rows_affected();
                }
                Ok(added)
            }
            async fn insert_localisation(&mut self, row: &LocalisationRow) -> Res<()> {
                let sql = format!(
                    "INSERT INTO gcn_localisations ({LOCALISATION_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) \
                     ON CONFLICT (loc_key) DO NOTHING"
                );
                sqlx::query(&sql)
                    .bind(&row.loc_key)
                    .bind(&row.dateobs)
                    .bind(row.ra)
                    .bind(row.dec)
                    .bind(row.error_radius_deg)
                    .bind(&row.origin)
                    .bind(&row.description)
                    .bind(&row.ivorn)
                    .bind(row.circular_id)
                    .bind(row.time_ms)
                    .bind(&row.moc)
                    .bind(row.area_deg2)
                    .bind(row.credible_level)
                    .execute(&mut **self)
                    .await
                    .map(|_| ())
            }
            async fn clear_derived(&mut self, id: i64) -> Res<()> {
                sqlx::query("DELETE FROM gcn_extractions WHERE circular_id = $1 AND origin = $2 AND tenant_id = ''")
                    .bind(id)
                    .bind(ORIGIN)
                    .execute(&mut **self)
                    .await?;
                sqlx::query("DELETE FROM gcn_localisations WHERE circular_id = $1 AND origin = 'circular'")
                    .bind(id)
                    .execute(&mut **self)
                    .await
                    .map(|_| ())
            }
            async fn attach_mentioning(&mut self, key: &str, dateobs: &str) -> Res<u64> {
                let which = "circular_id IN (SELECT c.circular_id FROM gcn_circulars c \
                             JOIN gcn_mentions m ON m.circular_id = c.circular_id \
                             WHERE m.alias_key = $2 AND c.dateobs IS NULL)";
                let derived = [
                    format!("UPDATE gcn_extractions SET dateobs = $1 WHERE dateobs IS NULL AND {which}"),
                    format!("UPDATE gcn_localisations SET dateobs = $1 WHERE dateobs IS NULL AND {which}"),
                ];
                for sql in &derived {
                    sqlx::query(sql).bind(dateobs).bind(key).execute(&mut **self).await?;
                }
                let sql = format!("UPDATE gcn_circulars SET dateobs = $1 WHERE {which}");
                Ok(sqlx::query(&sql).bind(dateobs).bind(key).execute(&mut **self).await?.rows_affected())
            }
            async fn insert_notice(&mut self, n: &Notice, dateobs: &str, source: &str, checksum: &str, now: i64) -> Res<()> {
                let sql = "INSERT INTO gcn_notices (ivorn, dateobs, format, mission, instrument, notice_type, packet_type, \
                           trigger_id, time_ms, notice_date_ms, skymap_url, source, checksum, content, ingested_at_ms) \
                           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)";
                sqlx::query(sql)
                    .bind(&n.key)
                    .bind(dateobs)
                    .bind(n.format.as_str())
                    .bind(&n.mission)
                    .bind(&n.instrument)
                    .bind(&n.notice_type)
                    .bind(n.packet_type)
                    .bind(&n.trigger_id)
                    .bind(n.time.ms())
                    .bind(n.notice_date.map(DateObs::ms))
                    .bind(&n.skymap_url)
                    .bind(source)
                    .bind(checksum)
                    .bind(&n.content)
                    .bind(now)
                    .execute(&mut **self)
                    .await
                    .map(|_| ())
            }
            async fn insert_file(&mut self, checksum: &str, source: &str, kind: &str, items: i64, now: i64) -> Res<()> {
                let sql = "INSERT INTO gcn_files (checksum, source, kind, items, ingested_at_ms) VALUES ($1, $2, $3, $4, $5)";
                sqlx::query(sql)
                    .bind(checksum)
                    .bind(source)
                    .bind(kind)
                    .bind(items)
                    .bind(now)
                    .execute(&mut **self)
                    .await
                    .map(|_| ())
            }
        }
    };
}

ingest_tx!(sqlx::Sqlite, None);
ingest_tx!(
    sqlx::Postgres,
    Some("SELECT pg_advisory_xact_lock(hashtext('ithaca-gcn-ingest'))")
);

/// The first free dateobs at or after `t`: two events never share a key, so
/// a second event estimated at the same instant is moved by a millisecond.
async fn free_dateobs<T: IngestTx>(tx: &mut T, t: DateObs) -> Result<DateObs, ServiceError> {
    let mut t = t;
    for _ in 0..1000 {
        if !tx.event_exists(&t.to_string()).await? {
            return Ok(t);
        }
        t = DateObs::from_ms(t.ms() + 1)
            .ok_or_else(|| ServiceError::invalid("dateobs out of range"))?;
    }
    Err(ServiceError::precondition(format!(
        "no free dateobs near {t}: a thousand events within a second"
    )))
}

async fn create_event<T: IngestTx>(
    tx: &mut T,
    at: DateObs,
    kind: EventKind,
    from: &str,
    exact: bool,
    now: i64,
) -> Result<String, ServiceError> {
    let t = free_dateobs(tx, at).await?;
    let dateobs = t.to_string();
    tx.insert_event(&EventRow {
        dateobs: dateobs.clone(),
        dateobs_ms: t.ms(),
        kind: kind.as_str().to_owned(),
        dateobs_from: from.to_owned(),
        time_exact: i64::from(exact),
        created_at_ms: now,
    })
    .await?;
    Ok(dateobs)
}

/// What the built-in parser reads in `c`, stored against `dateobs` (or
/// against nothing yet). Returns the extractions added.
async fn store_derived<T: IngestTx>(
    tx: &mut T,
    c: &Circular,
    dateobs: Option<&str>,
) -> Result<i64, ServiceError> {
    let mut per_kind: HashMap<&str, usize> = HashMap::new();
    let mut rows = Vec::new();
    let mut circles = 0;
    for e in extract::extract(c) {
        let n = per_kind.entry(e.kind).or_insert(0);
        *n += 1;
        if let Some((ra, dec, r)) = e.circle {
            circles += 1;
            tx.insert_localisation(&LocalisationRow {
                loc_key: format!("circular:{}:{circles}", c.circular_id),
                dateobs: dateobs.map(str::to_owned),
                ra,
                dec,
                error_radius_deg: r,
                origin: LocOrigin::Circular.as_str().to_owned(),
                description: format!("GCN Circular {} ({ORIGIN})", c.circular_id),
                ivorn: None,
                circular_id: Some(c.circular_id),
                time_ms: c.created_on_ms,
                moc: None,
                area_deg2: None,
                credible_level: None,
            })
            .await?;
        }
        rows.push(ExtractionRow {
            extraction_id: uuid::Uuid::new_v4().to_string(),
            tenant_id: String::new(),
            dateobs: dateobs.map(str::to_owned),
            origin: ORIGIN.to_owned(),
            kind: Some(e.kind.to_owned()),
            circular_id: Some(c.circular_id),
            producer_key: Some(format!("circular:{}:{}:{n}", c.circular_id, e.kind)),
            payload: e.payload.to_string(),
            created_by: SYSTEM.to_owned(),
            // The value is as old as the circular that states it, not the
            // ingest that read it.
            created_at_ms: c.created_on_ms,
        });
    }
    Ok(i64::try_from(tx.insert_extractions(&rows).await?).unwrap_or(i64::MAX))
}

/// Add `names` to `dateobs`; a name another event owns stays that event's.
/// Circulars that were waiting for one of the new names join the event.
async fn add_aliases<'a, T: IngestTx>(
    tx: &mut T,
    names: impl Iterator<Item = &'a super::model::Name>,
    dateobs: &str,
    from: &str,
    out: &mut Outcome,
    now: i64,
) -> Result<(), ServiceError> {
    for name in names {
        let key = name.key();
        if tx
            .insert_alias(&key, name.as_str(), dateobs, from, now)
            .await?
        {
            out.aliases_added += 1;
            let joined = tx.attach_mentioning(&key, dateobs).await?;
            out.attached += i64::try_from(joined).unwrap_or(i64::MAX);
        }
    }
    Ok(())
}

/// Circulars of one file that share a name (one that would become an
/// alias): whichever is read first decides the event, the others follow,
/// so MASTER's report on "Fermi trigger No 712927418" and GBM's on GRB
/// 230805B meet whatever their order.
struct Clusters {
    parent: Vec<usize>,
}

impl Clusters {
    fn new(names: &[CircularNames]) -> Self {
        let mut c = Clusters {
            parent: (0..names.len()).collect(),
        };
        let mut owner: HashMap<String, usize> = HashMap::new();
        for (i, n) in names.iter().enumerate() {
            for m in n.mentions.iter().filter(|m| m.alias) {
                match owner.get(&m.name.key()) {
                    Some(&j) => c.union(i, j),
                    None => {
                        owner.insert(m.name.key(), i);
                    }
                }
            }
        }
        c
    }

    fn root(&mut self, i: usize) -> usize {
        let mut r = i;
        while self.parent[r] != r {
            r = self.parent[r];
        }
        // Path compression keeps later lookups short.
        let mut j = i;
        while self.parent[j] != r {
            let next = self.parent[j];
            self.parent[j] = r;
            j = next;
        }
        r
    }

    fn union(&mut self, a: usize, b: usize) {
        let (ra, rb) = (self.root(a), self.root(b));
        if ra != rb {
            // The earlier circular's root stays the root.
            let (keep, join) = if ra < rb { (ra, rb) } else { (rb, ra) };
            self.parent[join] = keep;
        }
    }

    fn members(&mut self, root: usize) -> Vec<usize> {
        (0..self.parent.len())
            .filter(|i| self.root(*i) == root)
            .collect()
    }
}

/// Ingest a file of circulars (sorted by number).
pub async fn circulars<T: IngestTx>(
    tx: &mut T,
    items: &[Circular],
    now: i64,
    progress: Option<&Progress>,
) -> Result<Outcome, ServiceError> {
    let total = items.len() as u64;
    let names: Vec<CircularNames> = items.iter().map(identify::circular_names).collect();
    let mut clusters = Clusters::new(&names);
    // The event each cluster went to in this file.
    let mut cluster_event: HashMap<usize, String> = HashMap::new();
    // Circulars of this file stored without an event.
    let mut waiting: Vec<i64> = Vec::new();
    let mut out = Outcome {
        items: i64::try_from(items.len()).unwrap_or(i64::MAX),
        ..Outcome::default()
    };
    for (i, c) in items.iter().enumerate() {
        if i > 0 && i % PROGRESS_EVERY == 0 {
            report(progress, i as u64, total);
        }
        match tx.circular(c.circular_id).await? {
            Some((sum, _)) if sum == c.checksum => {
                out.unchanged += 1;
                continue;
            }
            Some((_, dateobs)) => {
                // GCN circulars are sometimes corrected: keep the newest text.
                tx.update_circular(c, now).await?;
                tx.clear_derived(c.circular_id).await?;
                out.extractions += store_derived(tx, c, dateobs.as_deref()).await?;
                out.updated += 1;
                if let Some(d) = dateobs {
                    out.touched(&d);
                }
                continue;
            }
            None => {}
        }
        let n = &names[i];
        let root = clusters.root(i);
        let mut event = None;
        for m in n.lookups() {
            if let Some(d) = tx.alias(&m.name.key()).await? {
                event = Some(d);
                break;
            }
        }
        if event.is_none() {
            event = cluster_event.get(&root).cloned();
        }
        let mut named = event.is_some();
        if event.is_none()
            && let Some(primary) = n.primary()
        {
            let members = clusters.members(root);
            let cluster: Vec<(&Circular, &CircularNames)> =
                members.iter().map(|j| (&items[*j], &names[*j])).collect();
            let estimate = identify::estimate(primary, &cluster);
            let kind = primary.creates.unwrap_or(EventKind::Other);
            // A burst already known to the second (another mission's
            // trigger, a notice) within seconds is this one.
            if estimate.exact && kind.groups_by_time() {
                event = nearest_burst(tx, estimate.dateobs).await?;
            }
            if event.is_none() && estimate.exact {
                event = coincident(tx, estimate.dateobs, kind).await?;
            }
            if event.is_none() {
                let d = create_event(
                    tx,
                    estimate.dateobs,
                    kind,
                    &estimate.from,
                    estimate.exact,
                    now,
                )
                .await?;
                out.events_created.push(d.clone());
                event = Some(d);
            }
            named = true;
        }
        if event.is_none() {
            // Named nothing: the event every circular it cites is about.
            let cited = tx.cited_events(&n.citations).await?;
            if let [only] = cited.as_slice() {
                event = Some(only.clone());
            }
        }
        tx.insert_circular(c, event.as_deref(), now).await?;
        out.stored += 1;
        match &event {
            Some(d) => {
                out.touched(d);
                if named {
                    cluster_event.entry(root).or_insert_with(|| d.clone());
                    let from = format!("GCN Circular {}", c.circular_id);
                    add_aliases(tx, n.aliases(), d, &from, &mut out, now).await?;
                }
            }
            None => {
                waiting.push(c.circular_id);
                for m in &n.mentions {
                    tx.insert_mention(&m.name.key(), c.circular_id).await?;
                }
            }
        }
        out.extractions += store_derived(tx, c, event.as_deref()).await?;
    }
    // Those of this file that later circulars' names attached are not
    // unattached any more.
    let mut still = 0;
    for id in waiting {
        if tx.circular(id).await?.is_some_and(|(_, d)| d.is_none()) {
            still += 1;
        }
    }
    out.unattached = still;
    report(progress, total, total);
    Ok(out)
}

/// The burst-like event with an exact time nearest `t` within
/// [`TIME_WINDOW_MS`], if any.
async fn nearest_burst<T: IngestTx>(
    tx: &mut T,
    t: DateObs,
) -> Result<Option<String>, ServiceError> {
    let mut near: Vec<(String, i64, String)> = tx
        .events_between(t.ms() - TIME_WINDOW_MS, t.ms() + TIME_WINDOW_MS)
        .await?
        .into_iter()
        .filter(|(_, _, kind)| EventKind::parse(kind).groups_by_time())
        .collect();
    near.sort_by_key(|(d, ms, _)| ((ms - t.ms()).abs(), d.clone()));
    Ok(near.into_iter().next().map(|(d, _, _)| d))
}

/// The event on the same trigger across messengers: for a
/// gravitational-wave candidate at `t`, the nearest burst-like event from
/// [`GW_BURST_BEFORE_MS`] before to [`GW_BURST_AFTER_MS`] after it; for a
/// burst, the nearest GW candidate in the mirrored window. Both keep their
/// names as aliases of the one event.
pub async fn coincident<T: IngestTx>(
    tx: &mut T,
    t: DateObs,
    kind: EventKind,
) -> Result<Option<String>, ServiceError> {
    let t = t.ms();
    let (lo, hi, wanted): (i64, i64, fn(EventKind) -> bool) = if kind == EventKind::Gw {
        (
            t - GW_BURST_BEFORE_MS,
            t + GW_BURST_AFTER_MS,
            EventKind::groups_by_time,
        )
    } else if kind.groups_by_time() {
        (t - GW_BURST_AFTER_MS, t + GW_BURST_BEFORE_MS, |k| {
            k == EventKind::Gw
        })
    } else {
        return Ok(None);
    };
    let mut near: Vec<(String, i64, String)> = tx
        .events_between(lo, hi)
        .await?
        .into_iter()
        .filter(|(_, _, k)| wanted(EventKind::parse(k)))
        .collect();
    near.sort_by_key(|(d, ms, _)| ((ms - t).abs(), d.clone()));
    Ok(near.into_iter().next().map(|(d, _, _)| d))
}

/// The names astronomers give a gravitational-wave event: `GW` and the
/// UTC date (`GW170817`), and the catalogue form with the time
/// (`GW170817_124104`). The short form goes to the first candidate of a
/// date; a second one that day keeps only the long form (an alias another
/// event owns stays that event's).
pub fn gw_names(t: DateObs) -> Vec<super::model::Name> {
    let iso = t.to_string();
    let b = iso.as_bytes();
    if iso.len() < 19 || !b[..19].is_ascii() {
        return Vec::new();
    }
    let date = format!("{}{}{}", &iso[2..4], &iso[5..7], &iso[8..10]);
    let clock = format!("{}{}{}", &iso[11..13], &iso[14..16], &iso[17..19]);
    vec![
        super::model::Name::new(format!("GW{date}")),
        super::model::Name::new(format!("GW{date}_{clock}")),
    ]
}

/// Ingest one notice.
pub async fn notice<T: IngestTx>(
    tx: &mut T,
    n: &Notice,
    source: &str,
    checksum: &str,
    now: i64,
) -> Result<Outcome, ServiceError> {
    let mut out = Outcome {
        items: 1,
        ..Outcome::default()
    };
    if tx.notice_seen(&n.key).await? {
        out.unchanged = 1;
        return Ok(out);
    }
    let mut event = None;
    for name in &n.names {
        if let Some(d) = tx.alias(&name.key()).await? {
            event = Some(d);
            break;
        }
    }
    if event.is_none() && n.kind.groups_by_time() {
        event = by_time(tx, n).await?;
    }
    if event.is_none() {
        event = coincident(tx, n.time, n.kind).await?;
    }
    let dateobs = match event {
        Some(d) => d,
        None => {
            let from = format!("{} notice {}", n.notice_type, n.key);
            let d = create_event(tx, n.time, n.kind, &from, true, now).await?;
            out.events_created.push(d.clone());
            d
        }
    };
    let from = format!("{} notice {}", n.notice_type, n.key);
    let mut names = n.names.clone();
    if n.kind == EventKind::Gw {
        names.extend(gw_names(n.time));
    }
    add_aliases(tx, names.iter(), &dateobs, &from, &mut out, now).await?;
    tx.insert_notice(n, &dateobs, source, checksum, now).await?;
    if let Some((ra, dec, r)) = n.position {
        let instrument = n
            .instrument
            .as_deref()
            .map(|i| format!(" {i}"))
            .unwrap_or_default();
        tx.insert_localisation(&LocalisationRow {
            loc_key: format!("notice:{}", n.key),
            dateobs: Some(dateobs.clone()),
            ra,
            dec,
            error_radius_deg: r,
            origin: LocOrigin::Notice.as_str().to_owned(),
            description: format!("{}{instrument} {} notice", n.mission, n.notice_type),
            ivorn: Some(n.key.clone()),
            circular_id: None,
            time_ms: n.notice_date.unwrap_or(n.time).ms(),
            moc: None,
            area_deg2: None,
            credible_level: None,
        })
        .await?;
    }
    out.stored = 1;
    out.touched(&dateobs);
    Ok(out)
}

/// A sky map and the event it is of are the same merger to within this:
/// both carry the candidate's time, to the millisecond or better.
pub const SKYMAP_MATCH_MS: i64 = 1_000;

/// Ingest one gravitational-wave sky map: its 90% credible region becomes
/// a localisation of the event its `OBJECT` names (a superevent or GraceDB
/// id already known as an alias), else of the GW candidate within
/// [`SKYMAP_MATCH_MS`] of its `DATE-OBS`, else of a burst in the
/// GW-burst coincidence window, else of a new GW event. The name and the
/// `GW` date names become aliases, as for a notice.
pub async fn sky_map<T: IngestTx>(
    tx: &mut T,
    m: &SkyMap,
    source: &str,
    checksum: &str,
    now: i64,
) -> Result<Outcome, ServiceError> {
    let mut out = Outcome {
        items: 1,
        ..Outcome::default()
    };
    let mut names: Vec<Name> = m.object.iter().map(Name::new).collect();
    let mut event = None;
    for name in &names {
        if let Some(d) = tx.alias(&name.key()).await? {
            event = Some(d);
            break;
        }
    }
    if event.is_none() {
        let t = m.time.ms();
        let mut near: Vec<(String, i64, String)> = tx
            .events_between(t - SKYMAP_MATCH_MS, t + SKYMAP_MATCH_MS)
            .await?
            .into_iter()
            .filter(|(_, _, kind)| EventKind::parse(kind) == EventKind::Gw)
            .collect();
        near.sort_by_key(|(d, ms, _)| ((ms - t).abs(), d.clone()));
        event = near.into_iter().next().map(|(d, _, _)| d);
    }
    if event.is_none() {
        event = coincident(tx, m.time, EventKind::Gw).await?;
    }
    let from = format!("sky map {source}");
    let dateobs = match event {
        Some(d) => d,
        None => {
            let d = create_event(tx, m.time, EventKind::Gw, &from, true, now).await?;
            out.events_created.push(d.clone());
            d
        }
    };
    names.extend(gw_names(m.time));
    add_aliases(tx, names.iter(), &dateobs, &from, &mut out, now).await?;
    let r = &m.region;
    let by = match (&m.creator, &m.instruments) {
        (Some(c), Some(i)) => format!(" ({c}, {i})"),
        (Some(one), None) | (None, Some(one)) => format!(" ({one})"),
        (None, None) => String::new(),
    };
    let name = m.object.as_deref().unwrap_or("GW");
    tx.insert_localisation(&LocalisationRow {
        // The file's checksum: a second map of the event (an update) is a
        // second localisation; the same file again is known before this.
        loc_key: format!("skymap:{}", checksum.get(..16).unwrap_or(checksum)),
        dateobs: Some(dateobs.clone()),
        ra: r.peak_ra_deg,
        dec: r.peak_dec_deg,
        error_radius_deg: r.equivalent_radius_deg,
        origin: LocOrigin::SkyMap.as_str().to_owned(),
        description: format!("{name} sky map {source}{by}"),
        ivorn: None,
        circular_id: None,
        time_ms: m.made.unwrap_or(m.time).ms(),
        moc: Some(r.moc.clone()),
        area_deg2: Some(r.area_deg2),
        credible_level: Some(r.level),
    })
    .await?;
    out.stored = 1;
    out.touched(&dateobs);
    Ok(out)
}

/// The event a trigger without a known id belongs to: the nearest in time
/// within [`TIME_WINDOW_MS`] among burst-like events whose positions (when
/// both have one) agree.
async fn by_time<T: IngestTx>(tx: &mut T, n: &Notice) -> Result<Option<String>, ServiceError> {
    let t = n.time.ms();
    let mut near: Vec<(String, i64, String)> = tx
        .events_between(t - TIME_WINDOW_MS, t + TIME_WINDOW_MS)
        .await?
        .into_iter()
        .filter(|(_, _, kind)| EventKind::parse(kind).groups_by_time())
        .collect();
    near.sort_by_key(|(d, ms, _)| ((ms - t).abs(), d.clone()));
    for (dateobs, _, _) in near {
        let Some((ra, dec, r)) = n.position else {
            return Ok(Some(dateobs));
        };
        let circles = tx.circles(&dateobs).await?;
        let agrees = circles.is_empty()
            || circles.iter().any(|(ra2, dec2, r2)| {
                separation_deg(ra, dec, *ra2, *dec2) <= r + r2 + POSITION_SLACK_DEG
            });
        if agrees {
            return Ok(Some(dateobs));
        }
    }
    Ok(None)
}
