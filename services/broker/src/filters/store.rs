//! The filter tables' SQL, one text for SQLite and PostgreSQL: streams,
//! groups and their streams, filters, versions with their verdicts, the
//! previews recorded per session, and saved matches. Every read of a
//! tenant's object names the tenant; versions and matches are reached only
//! through a filter read that way.

use ithaca_kit::db::Db;
use ithaca_kit::with_pool;

/// Matches per INSERT statement (8 parameters each).
const MATCH_BATCH: usize = 500;

/// An alert stream (reference data).
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct StreamRow {
    pub stream_id: String,
    pub name: String,
    pub survey: String,
    /// Space-separated `candidate.programid`s.
    pub programids: String,
    /// Space-separated path prefixes the stream does not carry.
    pub withheld: String,
    pub description: String,
}

impl StreamRow {
    /// What a stream lets a pipeline see: its programmes, and the schema paths
    /// it carries as prefixes (`None`: every path). A stream that withholds
    /// `candidate.programpi` carries `candidate.jd`, `candidate.magpsf`, … but
    /// not `candidate` as a whole, which would include what it withholds.
    pub fn bounds(
        &self,
        schema: &[crate::alerts::schema::FlatField],
    ) -> super::pipeline::StreamBounds {
        let withheld = self.withheld();
        let under = |path: &str, prefix: &str| {
            path == prefix
                || path
                    .strip_prefix(prefix)
                    .is_some_and(|rest| rest.starts_with('.'))
        };
        let fields = (!withheld.is_empty()).then(|| {
            let mut carried: Vec<String> = Vec::new();
            for f in schema {
                let field = f.field.as_str();
                let hidden = withheld.iter().any(|w| under(field, w));
                let holds_hidden = withheld.iter().any(|w| under(w, field));
                if !hidden && !holds_hidden && !carried.iter().any(|c| under(field, c)) {
                    carried.push(field.to_owned());
                }
            }
            carried
        });
        super::pipeline::StreamBounds {
            programids: self.programids(),
            fields,
        }
    }

    pub fn programids(&self) -> Vec<i32> {
        self.programids
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    }

    pub fn withheld(&self) -> Vec<String> {
        self.withheld
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    }
}

/// A tenant's group.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct GroupRow {
    pub group_id: String,
    pub tenant_id: String,
    pub name: String,
    pub created_at_ms: i64,
}

/// A filter.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct FilterRow {
    pub filter_id: String,
    pub tenant_id: String,
    pub group_id: String,
    pub stream_id: String,
    pub broker_id: String,
    pub name: String,
    pub autosave: bool,
    pub autosave_keep: i64,
    pub last_version: i64,
    pub active_version: Option<i64>,
    pub activated_at_ms: Option<i64>,
    pub created_by: String,
    pub created_at_ms: i64,
}

/// A version with its latest verdict.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct VersionRow {
    pub filter_id: String,
    pub version: i64,
    /// Canonical JSON when it compiled; as posted (keys sorted) otherwise.
    pub pipeline: String,
    pub pipeline_hash: String,
    pub created_by: String,
    pub created_at_ms: i64,
    pub passed: bool,
    /// JSON list of problems.
    pub problems: String,
    /// JSON list of warnings.
    pub warnings: String,
    pub validated_at_ms: i64,
}

/// A verdict to store on a version.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    pub pipeline: String,
    pub pipeline_hash: String,
    pub passed: bool,
    pub problems: String,
    pub warnings: String,
    pub at_ms: i64,
}

/// A preview recorded in a session, with what it found.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct PreviewRecord {
    pub tenant_id: String,
    pub session_id: String,
    pub pipeline_hash: String,
    pub stream_id: String,
    pub at_ms: i64,
    pub evaluated: Option<i64>,
    pub matched: Option<i64>,
    /// JSON `[[stage, kept], ...]` of the `$match` stages.
    pub stages: Option<String>,
}

/// An active version with its filter (the live path's input).
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct ActiveRow {
    pub filter_id: String,
    pub tenant_id: String,
    pub stream_id: String,
    pub broker_id: String,
    pub autosave: bool,
    pub autosave_keep: i64,
    pub version: i64,
    pub pipeline: String,
}

/// A saved match.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct MatchRow {
    pub filter_id: String,
    pub candid: i64,
    pub version: i64,
    pub broker_id: String,
    pub object_id: String,
    pub jd: f64,
    pub matched_at_ms: i64,
    /// The alert as the version's pipeline output it, JSON (`{}` for
    /// matches saved before it was kept).
    pub fields: String,
}

const FILTER_COLUMNS: &str = "filter_id, tenant_id, group_id, stream_id, broker_id, name, autosave, \
     autosave_keep, last_version, active_version, activated_at_ms, created_by, created_at_ms";

const VERSION_COLUMNS: &str = "filter_id, version, pipeline, pipeline_hash, created_by, created_at_ms, \
     passed, problems, warnings, validated_at_ms";

/// The filter tables.
#[derive(Clone, Debug)]
pub struct FilterStore {
    pub(super) db: Db,
}

impl FilterStore {
    pub fn new(db: Db) -> Self {
        FilterStore { db }
    }

    // ---- streams and groups --------------------------------------------------

    pub async fn streams(&self) -> Result<Vec<StreamRow>, sqlx::Error> {
        let sql = "SELECT stream_id, name, survey, programids, withheld, description \
                   FROM filter_streams ORDER BY stream_id";
        with_pool!(self.db, pool => sqlx::query_as::<_, StreamRow>(sql).fetch_all(pool).await)
    }

    /// The tenant's groups, oldest first.
    pub async fn groups(&self, tenant_id: &str) -> Result<Vec<GroupRow>, sqlx::Error> {
        let sql = "SELECT group_id, tenant_id, name, created_at_ms FROM filter_groups \
                   WHERE tenant_id = $1 ORDER BY created_at_ms, name";
        with_pool!(self.db, pool => sqlx::query_as::<_, GroupRow>(sql).bind(tenant_id).fetch_all(pool).await)
    }

    pub async fn group(
        &self,
        tenant_id: &str,
        group_id: &str,
    ) -> Result<Option<GroupRow>, sqlx::Error> {
        let sql = "SELECT group_id, tenant_id, name, created_at_ms FROM filter_groups \
                   WHERE tenant_id = $1 AND group_id = $2";
        with_pool!(self.db, pool => sqlx::query_as::<_, GroupRow>(sql)
            .bind(tenant_id)
            .bind(group_id)
            .fetch_optional(pool)
            .await)
    }

    /// `(group_id, stream_id)` of every group of the tenant.
    pub async fn group_streams(
        &self,
        tenant_id: &str,
    ) -> Result<Vec<(String, String)>, sqlx::Error> {
        let sql = "SELECT s.group_id, s.stream_id FROM filter_group_streams s \
                   JOIN filter_groups g ON g.group_id = s.group_id \
                   WHERE g.tenant_id = $1 ORDER BY s.group_id, s.stream_id";
        with_pool!(self.db, pool => sqlx::query_as::<_, (String, String)>(sql)
            .bind(tenant_id)
            .fetch_all(pool)
            .await)
    }

    /// Create a group with its streams, in one transaction. False when the
    /// tenant has a group of that name already (nothing written).
    pub async fn insert_group(
        &self,
        group: &GroupRow,
        streams: &[String],
    ) -> Result<bool, sqlx::Error> {
        let _gate = self.db.write_gate().await;
        let insert = "INSERT INTO filter_groups (group_id, tenant_id, name, created_at_ms) \
                      VALUES ($1, $2, $3, $4) ON CONFLICT (tenant_id, name) DO NOTHING";
        let link = "INSERT INTO filter_group_streams (group_id, stream_id) VALUES ($1, $2) \
                    ON CONFLICT (group_id, stream_id) DO NOTHING";
        with_pool!(self.db, pool => {
            let mut tx = pool.begin().await?;
            let created = sqlx::query(insert)
                .bind(&group.group_id)
                .bind(&group.tenant_id)
                .bind(&group.name)
                .bind(group.created_at_ms)
                .execute(&mut *tx)
                .await?
                .rows_affected()
                == 1;
            if !created {
                return Ok(false);
            }
            for s in streams {
                sqlx::query(link).bind(&group.group_id).bind(s).execute(&mut *tx).await?;
            }
            tx.commit().await?;
            Ok(true)
        })
    }

    // ---- filters -------------------------------------------------------------

    pub async fn insert_filter(&self, f: &FilterRow) -> Result<(), sqlx::Error> {
        let _gate = self.db.write_gate().await;
        let sql = format!(
            "INSERT INTO filters ({FILTER_COLUMNS}) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)"
        );
        with_pool!(self.db, pool => sqlx::query(&sql)
            .bind(&f.filter_id)
            .bind(&f.tenant_id)
            .bind(&f.group_id)
            .bind(&f.stream_id)
            .bind(&f.broker_id)
            .bind(&f.name)
            .bind(f.autosave)
            .bind(f.autosave_keep)
            .bind(f.last_version)
            .bind(f.active_version)
            .bind(f.activated_at_ms)
            .bind(&f.created_by)
            .bind(f.created_at_ms)
            .execute(pool)
            .await
            .map(|_| ()))
    }

    pub async fn filter(
        &self,
        tenant_id: &str,
        filter_id: &str,
    ) -> Result<Option<FilterRow>, sqlx::Error> {
        let sql =
            format!("SELECT {FILTER_COLUMNS} FROM filters WHERE tenant_id = $1 AND filter_id = $2");
        with_pool!(self.db, pool => sqlx::query_as::<_, FilterRow>(&sql)
            .bind(tenant_id)
            .bind(filter_id)
            .fetch_optional(pool)
            .await)
    }

    /// One page of the tenant's filters, newest first, and how many it has;
    /// with `search`, only those whose lower-cased name contains it (a
    /// lower-case text; `%`, `_` and `\\` in it are taken literally).
    pub async fn filters_of(
        &self,
        tenant_id: &str,
        search: Option<&str>,
        limit: i64,
        offset: i64,
    ) -> Result<(Vec<FilterRow>, i64), sqlx::Error> {
        let pattern = format!("%{}%", like_escape(search.unwrap_or("")));
        let sql = format!(
            "SELECT {FILTER_COLUMNS} FROM filters WHERE tenant_id = $1 \
             AND LOWER(name) LIKE $2 ESCAPE '\\' \
             ORDER BY created_at_ms DESC, filter_id LIMIT $3 OFFSET $4"
        );
        let rows = with_pool!(self.db, pool => sqlx::query_as::<_, FilterRow>(&sql)
            .bind(tenant_id)
            .bind(&pattern)
            .bind(limit)
            .bind(offset)
            .fetch_all(pool)
            .await)?;
        let total = with_pool!(self.db, pool => sqlx::query_scalar::<_, i64>(
                "SELECT COUNT(*) FROM filters WHERE tenant_id = $1 AND LOWER(name) LIKE $2 ESCAPE '\\'")
            .bind(tenant_id)
            .bind(&pattern)
            .fetch_one(pool)
            .await)?;
        Ok((rows, total))
    }

    // ---- versions ------------------------------------------------------------

    /// Number the filter's next version and store it with its verdict, in
    /// one transaction. `None` when the filter is not the tenant's.
    pub async fn add_version(
        &self,
        tenant_id: &str,
        filter_id: &str,
        created_by: &str,
        verdict: &Verdict,
    ) -> Result<Option<i64>, sqlx::Error> {
        let _gate = self.db.write_gate().await;
        let bump = "UPDATE filters SET last_version = last_version + 1 \
                    WHERE tenant_id = $1 AND filter_id = $2 RETURNING last_version";
        let insert = format!(
            "INSERT INTO filter_versions ({VERSION_COLUMNS}) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
        );
        with_pool!(self.db, pool => {
            let mut tx = pool.begin().await?;
            let Some(version) = sqlx::query_scalar::<_, i64>(bump)
                .bind(tenant_id)
                .bind(filter_id)
                .fetch_optional(&mut *tx)
                .await?
            else {
                return Ok(None);
            };
            sqlx::query(&insert)
                .bind(filter_id)
                .bind(version)
                .bind(&verdict.pipeline)
                .bind(&verdict.pipeline_hash)
                .bind(created_by)
                .bind(verdict.at_ms)
                .bind(verdict.passed)
                .bind(&verdict.problems)
                .bind(&verdict.warnings)
                .bind(verdict.at_ms)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(Some(version))
        })
    }

    /// Every version of a filter, oldest first.
    pub async fn versions(&self, filter_id: &str) -> Result<Vec<VersionRow>, sqlx::Error> {
        let sql = format!(
            "SELECT {VERSION_COLUMNS} FROM filter_versions WHERE filter_id = $1 ORDER BY version"
        );
        with_pool!(self.db, pool => sqlx::query_as::<_, VersionRow>(&sql)
            .bind(filter_id)
            .fetch_all(pool)
            .await)
    }

    pub async fn version(
        &self,
        filter_id: &str,
        version: i64,
    ) -> Result<Option<VersionRow>, sqlx::Error> {
        let sql = format!(
            "SELECT {VERSION_COLUMNS} FROM filter_versions WHERE filter_id = $1 AND version = $2"
        );
        with_pool!(self.db, pool => sqlx::query_as::<_, VersionRow>(&sql)
            .bind(filter_id)
            .bind(version)
            .fetch_optional(pool)
            .await)
    }

    /// Replace a version's verdict (and its canonical pipeline and hash).
    pub async fn set_verdict(
        &self,
        filter_id: &str,
        version: i64,
        verdict: &Verdict,
    ) -> Result<(), sqlx::Error> {
        let _gate = self.db.write_gate().await;
        let sql = "UPDATE filter_versions SET pipeline = $3, pipeline_hash = $4, passed = $5, \
                   problems = $6, warnings = $7, validated_at_ms = $8 \
                   WHERE filter_id = $1 AND version = $2";
        with_pool!(self.db, pool => sqlx::query(sql)
            .bind(filter_id)
            .bind(version)
            .bind(&verdict.pipeline)
            .bind(&verdict.pipeline_hash)
            .bind(verdict.passed)
            .bind(&verdict.problems)
            .bind(&verdict.warnings)
            .bind(verdict.at_ms)
            .execute(pool)
            .await
            .map(|_| ()))
    }

    /// Make `version` the active one; returns the version it replaced.
    pub async fn activate(
        &self,
        tenant_id: &str,
        filter_id: &str,
        version: i64,
        at_ms: i64,
    ) -> Result<Option<i64>, sqlx::Error> {
        let _gate = self.db.write_gate().await;
        let read = "SELECT active_version FROM filters WHERE tenant_id = $1 AND filter_id = $2";
        let write = "UPDATE filters SET active_version = $3, activated_at_ms = $4 \
                     WHERE tenant_id = $1 AND filter_id = $2";
        with_pool!(self.db, pool => {
            let mut tx = pool.begin().await?;
            let previous = sqlx::query_scalar::<_, Option<i64>>(read)
                .bind(tenant_id)
                .bind(filter_id)
                .fetch_optional(&mut *tx)
                .await?
                .flatten();
            sqlx::query(write)
                .bind(tenant_id)
                .bind(filter_id)
                .bind(version)
                .bind(at_ms)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(previous)
        })
    }

    /// Every active version of every tenant's filters.
    pub async fn active(&self) -> Result<Vec<ActiveRow>, sqlx::Error> {
        let sql = "SELECT f.filter_id, f.tenant_id, f.stream_id, f.broker_id, f.autosave, \
                   f.autosave_keep, v.version, v.pipeline \
                   FROM filters f JOIN filter_versions v \
                   ON v.filter_id = f.filter_id AND v.version = f.active_version \
                   WHERE f.active_version IS NOT NULL ORDER BY f.filter_id";
        with_pool!(self.db, pool => sqlx::query_as::<_, ActiveRow>(sql).fetch_all(pool).await)
    }

    // ---- previews ------------------------------------------------------------

    /// Record that `p.pipeline_hash` was previewed on `p.stream_id` in a
    /// session, with what it found (the latest preview replaces the counts).
    pub async fn record_preview(&self, p: &PreviewRecord) -> Result<(), sqlx::Error> {
        let _gate = self.db.write_gate().await;
        let sql = "INSERT INTO filter_previews (tenant_id, session_id, pipeline_hash, stream_id, previewed_at_ms, \
                   evaluated, matched, stages) \
                   VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
                   ON CONFLICT (tenant_id, session_id, pipeline_hash, stream_id) \
                   DO UPDATE SET previewed_at_ms = excluded.previewed_at_ms, evaluated = excluded.evaluated, \
                   matched = excluded.matched, stages = excluded.stages";
        with_pool!(self.db, pool => sqlx::query(sql)
            .bind(&p.tenant_id)
            .bind(&p.session_id)
            .bind(&p.pipeline_hash)
            .bind(&p.stream_id)
            .bind(p.at_ms)
            .bind(p.evaluated)
            .bind(p.matched)
            .bind(&p.stages)
            .execute(pool)
            .await
            .map(|_| ()))
    }

    /// The tenant's latest preview (in any session) of `pipeline_hash` on
    /// `stream_id` that recorded its counts.
    pub async fn latest_preview(
        &self,
        tenant_id: &str,
        pipeline_hash: &str,
        stream_id: &str,
    ) -> Result<Option<PreviewRecord>, sqlx::Error> {
        let sql = "SELECT tenant_id, session_id, pipeline_hash, stream_id, previewed_at_ms AS at_ms, \
                   evaluated, matched, stages FROM filter_previews \
                   WHERE tenant_id = $1 AND pipeline_hash = $2 AND stream_id = $3 AND matched IS NOT NULL \
                   ORDER BY previewed_at_ms DESC LIMIT 1";
        with_pool!(self.db, pool => sqlx::query_as::<_, PreviewRecord>(sql)
            .bind(tenant_id)
            .bind(pipeline_hash)
            .bind(stream_id)
            .fetch_optional(pool)
            .await)
    }

    pub async fn previewed(
        &self,
        tenant_id: &str,
        session_id: &str,
        pipeline_hash: &str,
        stream_id: &str,
    ) -> Result<bool, sqlx::Error> {
        let sql = "SELECT COUNT(*) FROM filter_previews WHERE tenant_id = $1 AND session_id = $2 \
                   AND pipeline_hash = $3 AND stream_id = $4";
        let n = with_pool!(self.db, pool => sqlx::query_scalar::<_, i64>(sql)
            .bind(tenant_id)
            .bind(session_id)
            .bind(pipeline_hash)
            .bind(stream_id)
            .fetch_one(pool)
            .await)?;
        Ok(n > 0)
    }

    // ---- matches -------------------------------------------------------------

    /// Save a batch of matches in one transaction, then drop each filter's
    /// matches beyond the newest `keep`. `trims` is `(filter_id, keep)` of
    /// the filters in the batch.
    pub async fn save_matches(
        &self,
        matches: &[MatchRow],
        trims: &[(String, i64)],
    ) -> Result<u64, sqlx::Error> {
        if matches.is_empty() {
            return Ok(0);
        }
        let _gate = self.db.write_gate().await;
        // The oldest match still kept: everything ordered after it goes.
        let boundary = "SELECT matched_at_ms, candid FROM filter_matches WHERE filter_id = $1 \
                        ORDER BY matched_at_ms DESC, candid DESC LIMIT 1 OFFSET $2";
        let trim = "DELETE FROM filter_matches WHERE filter_id = $1 \
                    AND (matched_at_ms < $2 OR (matched_at_ms = $2 AND candid < $3))";
        let mut saved = 0;
        with_pool!(self.db, pool => {
            let mut tx = pool.begin().await?;
            for chunk in matches.chunks(MATCH_BATCH) {
                let mut builder = sqlx::QueryBuilder::new(
                    "INSERT INTO filter_matches (filter_id, candid, version, broker_id, object_id, jd, matched_at_ms, fields) ",
                );
                builder.push_values(chunk, |mut b, m| {
                    b.push_bind(&m.filter_id)
                        .push_bind(m.candid)
                        .push_bind(m.version)
                        .push_bind(&m.broker_id)
                        .push_bind(&m.object_id)
                        .push_bind(m.jd)
                        .push_bind(m.matched_at_ms)
                        .push_bind(&m.fields);
                });
                builder.push(" ON CONFLICT (filter_id, candid) DO NOTHING");
                saved += builder.build().execute(&mut *tx).await?.rows_affected();
            }
            for (filter_id, keep) in trims {
                let last_kept = sqlx::query_as::<_, (i64, i64)>(boundary)
                    .bind(filter_id)
                    .bind(keep - 1)
                    .fetch_optional(&mut *tx)
                    .await?;
                if let Some((at, candid)) = last_kept {
                    sqlx::query(trim)
                        .bind(filter_id)
                        .bind(at)
                        .bind(candid)
                        .execute(&mut *tx)
                        .await?;
                }
            }
            tx.commit().await?;
        });
        Ok(saved)
    }

    /// The newest matches of a filter.
    pub async fn latest_matches(
        &self,
        filter_id: &str,
        limit: i64,
    ) -> Result<Vec<MatchRow>, sqlx::Error> {
        let sql = "SELECT filter_id, candid, version, broker_id, object_id, jd, matched_at_ms, fields \
                   FROM filter_matches WHERE filter_id = $1 \
                   ORDER BY matched_at_ms DESC, candid DESC LIMIT $2";
        with_pool!(self.db, pool => sqlx::query_as::<_, MatchRow>(sql)
            .bind(filter_id)
            .bind(limit)
            .fetch_all(pool)
            .await)
    }

    pub async fn match_count(&self, filter_id: &str) -> Result<i64, sqlx::Error> {
        let sql = "SELECT COUNT(*) FROM filter_matches WHERE filter_id = $1";
        with_pool!(self.db, pool => sqlx::query_scalar::<_, i64>(sql)
            .bind(filter_id)
            .fetch_one(pool)
            .await)
    }
}

/// `text` with LIKE's wildcards and its escape character escaped (`\\`).
fn like_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}
