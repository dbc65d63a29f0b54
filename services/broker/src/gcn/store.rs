//! The GCN tables' SQL for reading, and for what tenants write (producer
//! extractions, comments); one text for SQLite and PostgreSQL. Ingest's
//! transaction is in [`super::ingest`].

use ithaca_kit::db::Db;
use ithaca_kit::with_pool;

/// An event row.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct EventRow {
    pub dateobs: String,
    pub dateobs_ms: i64,
    pub kind: String,
    pub dateobs_from: String,
    /// 1 when the time is known to the second, else 0.
    pub time_exact: i64,
    pub created_at_ms: i64,
}

/// A circular as stored.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct CircularRow {
    pub circular_id: i64,
    pub dateobs: Option<String>,
    pub subject: String,
    pub submitter: String,
    pub created_on_ms: i64,
    pub body: String,
    pub event_id: Option<String>,
    pub bibcode: Option<String>,
}

/// A notice as stored, without its document.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct NoticeRow {
    pub ivorn: String,
    pub dateobs: String,
    pub format: String,
    pub mission: String,
    pub instrument: Option<String>,
    pub notice_type: String,
    pub packet_type: Option<i64>,
    pub trigger_id: Option<String>,
    pub time_ms: i64,
    pub notice_date_ms: Option<i64>,
    pub skymap_url: Option<String>,
    pub source: String,
}

/// A localisation row.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct LocalisationRow {
    pub loc_key: String,
    pub dateobs: Option<String>,
    pub ra: f64,
    pub dec: f64,
    pub error_radius_deg: f64,
    pub origin: String,
    pub description: String,
    pub ivorn: Option<String>,
    pub circular_id: Option<i64>,
    pub time_ms: i64,
    /// A sky map's credible region as an IVOA ASCII MOC; NULL for circles.
    pub moc: Option<String>,
    pub area_deg2: Option<f64>,
    pub credible_level: Option<f64>,
}

/// An extraction row.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct ExtractionRow {
    pub extraction_id: String,
    pub tenant_id: String,
    pub dateobs: Option<String>,
    pub origin: String,
    pub kind: Option<String>,
    pub circular_id: Option<i64>,
    pub producer_key: Option<String>,
    /// JSON.
    pub payload: String,
    pub created_by: String,
    pub created_at_ms: i64,
}

/// A comment row.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct CommentRow {
    pub comment_id: String,
    pub tenant_id: String,
    pub dateobs: String,
    pub author: String,
    pub actor: String,
    pub session_id: Option<String>,
    pub text: String,
    pub created_at_ms: i64,
}

/// What `get_gcn_events` searches for: a dateobs prefix and alias prefixes
/// (already normalized: uppercase dateobs, lowercase aliases, LIKE-escaped).
#[derive(Clone, Debug, Default)]
pub struct EventFilter {
    pub dateobs_prefix: Option<String>,
    pub alias_prefixes: Vec<String>,
}

pub const EVENT_COLUMNS: &str =
    "dateobs, dateobs_ms, kind, dateobs_from, time_exact, created_at_ms";
pub const CIRCULAR_COLUMNS: &str =
    "circular_id, dateobs, subject, submitter, created_on_ms, body, event_id, bibcode";
pub const NOTICE_COLUMNS: &str = "ivorn, dateobs, format, mission, instrument, notice_type, packet_type, \
     trigger_id, time_ms, notice_date_ms, skymap_url, source";
pub const LOCALISATION_COLUMNS: &str = "loc_key, dateobs, ra, dec, error_radius_deg, origin, description, ivorn, circular_id, time_ms, \
     moc, area_deg2, credible_level";
pub const EXTRACTION_COLUMNS: &str = "extraction_id, tenant_id, dateobs, origin, kind, circular_id, producer_key, \
     payload, created_by, created_at_ms";
const COMMENT_COLUMNS: &str =
    "comment_id, tenant_id, dateobs, author, actor, session_id, text, created_at_ms";

/// Escape `%`, `_` and `\` for a LIKE pattern with `ESCAPE '\'`.
pub fn like_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `$first, $first+1, …` for `n` values.
fn placeholders(first: usize, n: usize) -> String {
    (first..first + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The GCN tables.
#[derive(Clone, Debug)]
pub struct GcnStore {
    db: Db,
}

impl GcnStore {
    pub fn new(db: Db) -> Self {
        GcnStore { db }
    }

    pub fn db(&self) -> &Db {
        &self.db
    }

    /// The WHERE clause of an event search, its parameters starting at $1.
    fn event_where(filter: &EventFilter) -> (String, Vec<String>) {
        let mut parts = Vec::new();
        let mut binds = Vec::new();
        if let Some(p) = &filter.dateobs_prefix {
            binds.push(format!("{p}%"));
            parts.push(format!("dateobs LIKE ${} ESCAPE '\\'", binds.len()));
        }
        for a in &filter.alias_prefixes {
            binds.push(format!("{a}%"));
            parts.push(format!(
                "dateobs IN (SELECT dateobs FROM gcn_aliases WHERE alias_key LIKE ${} ESCAPE '\\')",
                binds.len()
            ));
        }
        if parts.is_empty() {
            (String::new(), binds)
        } else {
            (format!(" WHERE {}", parts.join(" OR ")), binds)
        }
    }

    /// Events matching `filter`, newest first, and how many match in all.
    pub async fn events(
        &self,
        filter: &EventFilter,
        limit: i64,
        offset: i64,
    ) -> Result<(Vec<EventRow>, i64), sqlx::Error> {
        let (clause, binds) = Self::event_where(filter);
        let n = binds.len();
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM gcn_events{clause} ORDER BY dateobs_ms DESC LIMIT ${} OFFSET ${}",
            n + 1,
            n + 2
        );
        let count_sql = format!("SELECT COUNT(*) FROM gcn_events{clause}");
        with_pool!(self.db, pool => {
            let mut q = sqlx::query_as::<_, EventRow>(&sql);
            let mut c = sqlx::query_scalar::<_, i64>(&count_sql);
            for b in &binds {
                q = q.bind(b);
                c = c.bind(b);
            }
            let rows = q.bind(limit).bind(offset).fetch_all(pool).await?;
            let total = c.fetch_one(pool).await?;
            Ok((rows, total))
        })
    }

    pub async fn event(&self, dateobs: &str) -> Result<Option<EventRow>, sqlx::Error> {
        let sql = format!("SELECT {EVENT_COLUMNS} FROM gcn_events WHERE dateobs = $1");
        with_pool!(self.db, pool => sqlx::query_as::<_, EventRow>(&sql).bind(dateobs).fetch_optional(pool).await)
    }

    /// The event that owns the alias with this (lowercase) key.
    pub async fn by_alias(&self, key: &str) -> Result<Option<String>, sqlx::Error> {
        let sql = "SELECT dateobs FROM gcn_aliases WHERE alias_key = $1";
        with_pool!(self.db, pool => sqlx::query_scalar::<_, String>(sql).bind(key).fetch_optional(pool).await)
    }

    /// `(dateobs, alias)` of the given events, in the order they were added.
    pub async fn aliases(&self, events: &[String]) -> Result<Vec<(String, String)>, sqlx::Error> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT dateobs, alias FROM gcn_aliases WHERE dateobs IN ({}) ORDER BY created_at_ms, alias",
            placeholders(1, events.len())
        );
        with_pool!(self.db, pool => {
            let mut q = sqlx::query_as::<_, (String, String)>(&sql);
            for e in events {
                q = q.bind(e);
            }
            q.fetch_all(pool).await
        })
    }

    /// `(dateobs, count)` of rows of `table` per event.
    pub async fn counts(
        &self,
        table: Counted,
        events: &[String],
    ) -> Result<Vec<(String, i64)>, sqlx::Error> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT dateobs, COUNT(*) FROM {} WHERE dateobs IN ({}) GROUP BY dateobs",
            table.as_str(),
            placeholders(1, events.len())
        );
        with_pool!(self.db, pool => {
            let mut q = sqlx::query_as::<_, (String, i64)>(&sql);
            for e in events {
                q = q.bind(e);
            }
            q.fetch_all(pool).await
        })
    }

    /// Localisations of the given events, best (smallest circle) first.
    pub async fn localisations(
        &self,
        events: &[String],
    ) -> Result<Vec<LocalisationRow>, sqlx::Error> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT {LOCALISATION_COLUMNS} FROM gcn_localisations WHERE dateobs IN ({}) \
             ORDER BY error_radius_deg, time_ms, loc_key",
            placeholders(1, events.len())
        );
        with_pool!(self.db, pool => {
            let mut q = sqlx::query_as::<_, LocalisationRow>(&sql);
            for e in events {
                q = q.bind(e);
            }
            q.fetch_all(pool).await
        })
    }

    pub async fn circulars(&self, dateobs: &str) -> Result<Vec<CircularRow>, sqlx::Error> {
        let sql = format!(
            "SELECT {CIRCULAR_COLUMNS} FROM gcn_circulars WHERE dateobs = $1 ORDER BY circular_id"
        );
        with_pool!(self.db, pool => sqlx::query_as::<_, CircularRow>(&sql).bind(dateobs).fetch_all(pool).await)
    }

    /// A page of an event's circulars by number, after `after` (exclusive);
    /// `limit + 1` rows are asked for so the caller knows whether more follow.
    pub async fn circulars_page(
        &self,
        dateobs: &str,
        after: Option<i64>,
        limit: i64,
    ) -> Result<Vec<CircularRow>, sqlx::Error> {
        let sql = format!(
            "SELECT {CIRCULAR_COLUMNS} FROM gcn_circulars WHERE dateobs = $1 AND circular_id > $2 \
             ORDER BY circular_id LIMIT $3"
        );
        with_pool!(self.db, pool => sqlx::query_as::<_, CircularRow>(&sql)
            .bind(dateobs)
            .bind(after.unwrap_or(i64::MIN))
            .bind(limit + 1)
            .fetch_all(pool)
            .await)
    }

    /// One circular by its number.
    pub async fn circular(&self, id: i64) -> Result<Option<CircularRow>, sqlx::Error> {
        let sql = format!("SELECT {CIRCULAR_COLUMNS} FROM gcn_circulars WHERE circular_id = $1");
        with_pool!(self.db, pool => sqlx::query_as::<_, CircularRow>(&sql).bind(id).fetch_optional(pool).await)
    }

    /// Circulars whose subject or body contains every one of `words`
    /// (lowercase, LIKE-escaped), optionally of one event, newest first,
    /// below `before` (exclusive); `limit + 1` rows, and how many match in
    /// all. `LOWER` folds ASCII letters on both databases.
    pub async fn search_circulars(
        &self,
        words: &[String],
        dateobs: Option<&str>,
        before: Option<i64>,
        limit: i64,
    ) -> Result<(Vec<CircularRow>, i64), sqlx::Error> {
        let mut parts = Vec::new();
        let mut binds: Vec<String> = Vec::new();
        for w in words {
            binds.push(format!("%{w}%"));
            let i = binds.len();
            parts.push(format!(
                "(LOWER(subject) LIKE ${i} ESCAPE '\\' OR LOWER(body) LIKE ${i} ESCAPE '\\')"
            ));
        }
        if let Some(d) = dateobs {
            binds.push(d.to_owned());
            parts.push(format!("dateobs = ${}", binds.len()));
        }
        let clause = if parts.is_empty() {
            "1 = 1".to_owned()
        } else {
            parts.join(" AND ")
        };
        let n = binds.len();
        let sql = format!(
            "SELECT {CIRCULAR_COLUMNS} FROM gcn_circulars WHERE {clause} AND circular_id < ${} \
             ORDER BY circular_id DESC LIMIT ${}",
            n + 1,
            n + 2
        );
        let count_sql = format!("SELECT COUNT(*) FROM gcn_circulars WHERE {clause}");
        with_pool!(self.db, pool => {
            let mut q = sqlx::query_as::<_, CircularRow>(&sql);
            let mut c = sqlx::query_scalar::<_, i64>(&count_sql);
            for b in &binds {
                q = q.bind(b);
                c = c.bind(b);
            }
            let rows = q
                .bind(before.unwrap_or(i64::MAX))
                .bind(limit + 1)
                .fetch_all(pool)
                .await?;
            Ok((rows, c.fetch_one(pool).await?))
        })
    }

    pub async fn notices(&self, dateobs: &str) -> Result<Vec<NoticeRow>, sqlx::Error> {
        let sql = format!(
            "SELECT {NOTICE_COLUMNS} FROM gcn_notices WHERE dateobs = $1 ORDER BY time_ms, notice_date_ms, ivorn"
        );
        with_pool!(self.db, pool => sqlx::query_as::<_, NoticeRow>(&sql).bind(dateobs).fetch_all(pool).await)
    }

    /// Extractions of an event visible to `tenant` (shared ones and its own),
    /// optionally of one origin and kind, oldest first; and how many match.
    pub async fn extractions(
        &self,
        dateobs: &str,
        tenant: &str,
        origin: Option<&str>,
        kind: Option<&str>,
        limit: i64,
    ) -> Result<(Vec<ExtractionRow>, i64), sqlx::Error> {
        let mut clause = "dateobs = $1 AND (tenant_id = '' OR tenant_id = $2)".to_owned();
        let mut binds = vec![dateobs.to_owned(), tenant.to_owned()];
        if let Some(o) = origin {
            binds.push(o.to_owned());
            clause.push_str(&format!(" AND origin = ${}", binds.len()));
        }
        if let Some(k) = kind {
            binds.push(k.to_owned());
            clause.push_str(&format!(" AND kind = ${}", binds.len()));
        }
        let sql = format!(
            "SELECT {EXTRACTION_COLUMNS} FROM gcn_extractions WHERE {clause} \
             ORDER BY circular_id, created_at_ms, extraction_id LIMIT ${}",
            binds.len() + 1
        );
        let count_sql = format!("SELECT COUNT(*) FROM gcn_extractions WHERE {clause}");
        with_pool!(self.db, pool => {
            let mut q = sqlx::query_as::<_, ExtractionRow>(&sql);
            let mut c = sqlx::query_scalar::<_, i64>(&count_sql);
            for b in &binds {
                q = q.bind(b);
                c = c.bind(b);
            }
            let rows = q.bind(limit).fetch_all(pool).await?;
            Ok((rows, c.fetch_one(pool).await?))
        })
    }

    /// The origins of an event's extractions visible to `tenant`.
    pub async fn extraction_origins(
        &self,
        dateobs: &str,
        tenant: &str,
    ) -> Result<Vec<(String, i64)>, sqlx::Error> {
        let sql = "SELECT origin, COUNT(*) FROM gcn_extractions WHERE dateobs = $1 \
                   AND (tenant_id = '' OR tenant_id = $2) GROUP BY origin ORDER BY origin";
        with_pool!(self.db, pool => sqlx::query_as::<_, (String, i64)>(sql).bind(dateobs).bind(tenant).fetch_all(pool).await)
    }

    /// Store a producer's extraction; with a `producer_key` a second one
    /// replaces the first (same tenant and origin). Returns the stored row.
    pub async fn put_extraction(&self, row: &ExtractionRow) -> Result<ExtractionRow, sqlx::Error> {
        let _gate = self.db.write_gate().await;
        let sql = format!(
            "INSERT INTO gcn_extractions ({EXTRACTION_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
             ON CONFLICT (tenant_id, origin, producer_key) DO UPDATE SET dateobs = excluded.dateobs, \
             kind = excluded.kind, circular_id = excluded.circular_id, payload = excluded.payload, \
             created_by = excluded.created_by, created_at_ms = excluded.created_at_ms \
             RETURNING {EXTRACTION_COLUMNS}"
        );
        with_pool!(self.db, pool => sqlx::query_as::<_, ExtractionRow>(&sql)
            .bind(&row.extraction_id)
            .bind(&row.tenant_id)
            .bind(&row.dateobs)
            .bind(&row.origin)
            .bind(&row.kind)
            .bind(row.circular_id)
            .bind(&row.producer_key)
            .bind(&row.payload)
            .bind(&row.created_by)
            .bind(row.created_at_ms)
            .fetch_one(pool)
            .await)
    }

    /// Whether circular `id` is attached to the event `dateobs`.
    pub async fn circular_of(&self, id: i64) -> Result<Option<Option<String>>, sqlx::Error> {
        let sql = "SELECT dateobs FROM gcn_circulars WHERE circular_id = $1";
        with_pool!(self.db, pool => sqlx::query_scalar::<_, Option<String>>(sql).bind(id).fetch_optional(pool).await)
    }

    /// A tenant's comments on an event, oldest first, and how many there are.
    pub async fn comments(
        &self,
        tenant: &str,
        dateobs: &str,
        limit: i64,
    ) -> Result<(Vec<CommentRow>, i64), sqlx::Error> {
        let sql = format!(
            "SELECT {COMMENT_COLUMNS} FROM gcn_comments WHERE tenant_id = $1 AND dateobs = $2 \
             ORDER BY created_at_ms, comment_id LIMIT $3"
        );
        let count = "SELECT COUNT(*) FROM gcn_comments WHERE tenant_id = $1 AND dateobs = $2";
        with_pool!(self.db, pool => {
            let rows = sqlx::query_as::<_, CommentRow>(&sql)
                .bind(tenant)
                .bind(dateobs)
                .bind(limit)
                .fetch_all(pool)
                .await?;
            let n = sqlx::query_scalar::<_, i64>(count).bind(tenant).bind(dateobs).fetch_one(pool).await?;
            Ok((rows, n))
        })
    }

    pub async fn insert_comment(&self, row: &CommentRow) -> Result<(), sqlx::Error> {
        let _gate = self.db.write_gate().await;
        let sql = format!(
            "INSERT INTO gcn_comments ({COMMENT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
        );
        with_pool!(self.db, pool => sqlx::query(&sql)
            .bind(&row.comment_id)
            .bind(&row.tenant_id)
            .bind(&row.dateobs)
            .bind(&row.author)
            .bind(&row.actor)
            .bind(&row.session_id)
            .bind(&row.text)
            .bind(row.created_at_ms)
            .execute(pool)
            .await
            .map(|_| ()))
    }

    /// Rows of every GCN table, for reports and tests: events, aliases,
    /// circulars, notices, localisations, extractions.
    pub async fn totals(&self) -> Result<Totals, sqlx::Error> {
        let sql = "SELECT (SELECT COUNT(*) FROM gcn_events), (SELECT COUNT(*) FROM gcn_aliases), \
                   (SELECT COUNT(*) FROM gcn_circulars), (SELECT COUNT(*) FROM gcn_notices), \
                   (SELECT COUNT(*) FROM gcn_localisations), (SELECT COUNT(*) FROM gcn_extractions)";
        with_pool!(self.db, pool => {
            let (events, aliases, circulars, notices, localisations, extractions) =
                sqlx::query_as::<_, (i64, i64, i64, i64, i64, i64)>(sql).fetch_one(pool).await?;
            Ok(Totals { events, aliases, circulars, notices, localisations, extractions })
        })
    }
}

/// Row counts of the GCN tables.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    pub events: i64,
    pub aliases: i64,
    pub circulars: i64,
    pub notices: i64,
    pub localisations: i64,
    pub extractions: i64,
}

/// The per-event tables [`GcnStore::counts`] counts.
#[derive(Clone, Copy, Debug)]
pub enum Counted {
    Circulars,
    Notices,
}

impl Counted {
    fn as_str(self) -> &'static str {
        match self {
            Counted::Circulars => "gcn_circulars",
            Counted::Notices => "gcn_notices",
        }
    }
}
