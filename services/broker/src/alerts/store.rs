//! The alert archive's SQL, one text for SQLite and PostgreSQL: brokers,
//! writer schemas, ingested files and alerts with their HEALPix index.

use super::cuts::Cuts;
use super::cuts_store::{CutsRow, insert_cuts};
use ithaca_kit::db::Db;
use ithaca_kit::with_pool;
use std::ops::RangeInclusive;

/// Alerts per INSERT statement (17 parameters each).
const INSERT_BATCH: usize = 200;

/// A configured broker. `altdata` and `credential` are sealed.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct BrokerRow {
    pub broker_id: String,
    pub name: String,
    pub survey: String,
    /// Space-separated.
    pub operations: String,
    pub altdata: Option<String>,
    pub credential: Option<String>,
    pub created_at_ms: i64,
}

/// What a broker holds.
#[derive(Clone, Debug, Default, PartialEq, sqlx::FromRow)]
pub struct BrokerStats {
    pub broker_id: String,
    pub alerts: i64,
    pub objects: i64,
    pub first_jd: Option<f64>,
    pub last_jd: Option<f64>,
}

/// A writer schema.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct SchemaRow {
    pub schema_id: String,
    pub version: String,
    pub schema_json: String,
    /// JSON list of [`super::schema::FlatField`].
    pub paths: String,
    pub first_seen_ms: i64,
}

/// An alert row without its packet.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct AlertRow {
    pub broker_id: String,
    pub candid: i64,
    pub object_id: String,
    pub jd: f64,
    pub fid: i64,
    pub ra: f64,
    pub dec: f64,
    pub hpx: i64,
    pub magpsf: Option<f64>,
    pub schemavsn: String,
    pub schema_id: String,
    pub prv_detections: i64,
    pub prv_upper_limits: i64,
    pub fp_hists: Option<i64>,
    /// The candidate record, JSON.
    pub candidate: String,
    pub ingested_at_ms: i64,
}

/// An alert to store: its row, its packet and its compact filter record.
#[derive(Clone, Debug)]
pub struct NewAlert {
    pub row: AlertRow,
    pub packet: Vec<u8>,
    pub cuts: Cuts,
}

/// A cone-search candidate: enough to check the exact distance and time.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct ConeHit {
    pub candid: i64,
    pub ra: f64,
    pub dec: f64,
    pub jd: f64,
}

/// A stored packet with what is needed to decode it.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct PacketRow {
    pub candid: i64,
    pub jd: f64,
    pub schema_id: String,
    pub packet: Vec<u8>,
}

const ALERT_COLUMNS: &str = "broker_id, candid, object_id, jd, fid, ra, dec, hpx, magpsf, schemavsn, \
     schema_id, prv_detections, prv_upper_limits, fp_hists, candidate, ingested_at_ms";

/// The alert tables.
#[derive(Clone, Debug)]
pub struct AlertStore {
    db: Db,
}

impl AlertStore {
    pub fn new(db: Db) -> Self {
        AlertStore { db }
    }

    /// The database, for the filter preview's streaming scans.
    pub fn db(&self) -> &Db {
        &self.db
    }

    pub async fn insert_broker(&self, b: &BrokerRow) -> Result<u64, sqlx::Error> {
        let _gate = self.db.write_gate().await;
        let sql = "INSERT INTO brokers (broker_id, name, survey, operations, altdata, credential, created_at_ms) \
                   VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (broker_id) DO NOTHING";
        with_pool!(self.db, pool => sqlx::query(sql)
            .bind(&b.broker_id)
            .bind(&b.name)
            .bind(&b.survey)
            .bind(&b.operations)
            .bind(&b.altdata)
            .bind(&b.credential)
            .bind(b.created_at_ms)
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))
    }

    pub async fn brokers(&self) -> Result<Vec<BrokerRow>, sqlx::Error> {
        let sql = "SELECT broker_id, name, survey, operations, altdata, credential, created_at_ms \
                   FROM brokers ORDER BY created_at_ms, broker_id";
        with_pool!(self.db, pool => sqlx::query_as::<_, BrokerRow>(sql).fetch_all(pool).await)
    }

    pub async fn broker(&self, broker_id: &str) -> Result<Option<BrokerRow>, sqlx::Error> {
        let sql = "SELECT broker_id, name, survey, operations, altdata, credential, created_at_ms \
                   FROM brokers WHERE broker_id = $1";
        with_pool!(self.db, pool => sqlx::query_as::<_, BrokerRow>(sql).bind(broker_id).fetch_optional(pool).await)
    }

    /// Alert counts of every broker that has alerts.
    pub async fn broker_stats(&self) -> Result<Vec<BrokerStats>, sqlx::Error> {
        let sql = "SELECT broker_id, COUNT(*) AS alerts, COUNT(DISTINCT object_id) AS objects, \
                   MIN(jd) AS first_jd, MAX(jd) AS last_jd FROM alerts GROUP BY broker_id";
        with_pool!(self.db, pool => sqlx::query_as::<_, BrokerStats>(sql).fetch_all(pool).await)
    }

    /// The alert count of an ingested file, when it was ingested before.
    pub async fn file(&self, broker_id: &str, checksum: &str) -> Result<Option<i64>, sqlx::Error> {
        let sql = "SELECT alerts FROM alert_files WHERE broker_id = $1 AND checksum = $2";
        with_pool!(self.db, pool => sqlx::query_scalar::<_, i64>(sql)
            .bind(broker_id)
            .bind(checksum)
            .fetch_optional(pool)
            .await)
    }

    /// Store one file's alerts in one transaction: its schema (once), the
    /// alerts not already present, and the file. Returns the candids newly
    /// stored (what the broker's filters then run on).
    pub async fn ingest_file(
        &self,
        file: FileRecord<'_>,
        schema: &SchemaRow,
        alerts: &[NewAlert],
        progress: Option<&crate::progress::Progress>,
    ) -> Result<Vec<i64>, sqlx::Error> {
        let total = alerts.len() as u64;
        let mut written = 0u64;
        let _gate = self.db.write_gate().await;
        let insert_schema = "INSERT INTO alert_schemas (schema_id, version, schema_json, paths, first_seen_ms) \
                             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (schema_id) DO NOTHING";
        let insert_file = "INSERT INTO alert_files (broker_id, checksum, source, alerts, ingested_at_ms) \
                           VALUES ($1, $2, $3, $4, $5) ON CONFLICT (broker_id, checksum) DO NOTHING";
        let mut stored = Vec::new();
        with_pool!(self.db, pool => {
            let mut tx = pool.begin().await?;
            sqlx::query(insert_schema)
                .bind(&schema.schema_id)
                .bind(&schema.version)
                .bind(&schema.schema_json)
                .bind(&schema.paths)
                .bind(schema.first_seen_ms)
                .execute(&mut *tx)
                .await?;
            for chunk in alerts.chunks(INSERT_BATCH) {
                let mut builder = sqlx::QueryBuilder::new(format!("INSERT INTO alerts ({ALERT_COLUMNS}, packet) "));
                builder.push_values(chunk, |mut b, a| {
                    let r = &a.row;
                    b.push_bind(&r.broker_id)
                        .push_bind(r.candid)
                        .push_bind(&r.object_id)
                        .push_bind(r.jd)
                        .push_bind(r.fid)
                        .push_bind(r.ra)
                        .push_bind(r.dec)
                        .push_bind(r.hpx)
                        .push_bind(r.magpsf)
                        .push_bind(&r.schemavsn)
                        .push_bind(&r.schema_id)
                        .push_bind(r.prv_detections)
                        .push_bind(r.prv_upper_limits)
                        .push_bind(r.fp_hists)
                        .push_bind(&r.candidate)
                        .push_bind(r.ingested_at_ms)
                        .push_bind(&a.packet);
                });
                builder.push(" ON CONFLICT (broker_id, candid) DO NOTHING RETURNING candid");
                let new = builder.build_query_scalar::<i64>().fetch_all(&mut *tx).await?;
                // The filter records of the alerts this chunk stored (an
                // alert stored before has its record, or the backfill's).
                let records: Vec<CutsRow<'_>> = chunk
                    .iter()
                    .filter(|a| new.contains(&a.row.candid))
                    .map(CutsRow::of)
                    .collect();
                insert_cuts!(&mut *tx, &records);
                stored.extend(new);
                written += chunk.len() as u64;
                crate::progress::report(progress, written, total);
            }
            sqlx::query(insert_file)
                .bind(file.broker_id)
                .bind(file.checksum)
                .bind(file.source)
                .bind(file.alerts)
                .bind(file.ingested_at_ms)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
        });
        Ok(stored)
    }

    pub async fn alert(
        &self,
        broker_id: &str,
        candid: i64,
    ) -> Result<Option<AlertRow>, sqlx::Error> {
        let sql =
            format!("SELECT {ALERT_COLUMNS} FROM alerts WHERE broker_id = $1 AND candid = $2");
        with_pool!(self.db, pool => sqlx::query_as::<_, AlertRow>(&sql)
            .bind(broker_id)
            .bind(candid)
            .fetch_optional(pool)
            .await)
    }

    /// Alerts of an object in a time window, oldest first, at most `limit`.
    pub async fn alerts_of_object(
        &self,
        broker_id: &str,
        object_id: &str,
        jd: (f64, f64),
        limit: i64,
    ) -> Result<Vec<AlertRow>, sqlx::Error> {
        let sql = format!(
            "SELECT {ALERT_COLUMNS} FROM alerts WHERE broker_id = $1 AND object_id = $2 \
             AND jd >= $3 AND jd <= $4 ORDER BY jd, candid LIMIT $5"
        );
        with_pool!(self.db, pool => sqlx::query_as::<_, AlertRow>(&sql)
            .bind(broker_id)
            .bind(object_id)
            .bind(jd.0)
            .bind(jd.1)
            .bind(limit)
            .fetch_all(pool)
            .await)
    }

    /// How many alerts an object has in a time window.
    pub async fn count_of_object(
        &self,
        broker_id: &str,
        object_id: &str,
        jd: (f64, f64),
    ) -> Result<i64, sqlx::Error> {
        let sql = "SELECT COUNT(*) FROM alerts WHERE broker_id = $1 AND object_id = $2 AND jd >= $3 AND jd <= $4";
        with_pool!(self.db, pool => sqlx::query_scalar::<_, i64>(sql)
            .bind(broker_id)
            .bind(object_id)
            .bind(jd.0)
            .bind(jd.1)
            .fetch_one(pool)
            .await)
    }

    /// Alerts whose index falls in `ranges` and whose time is in `jd`, at
    /// most `cap` (the caller checks the exact distance).
    pub async fn cone_candidates(
        &self,
        broker_id: &str,
        ranges: &[RangeInclusive<i64>],
        jd: (f64, f64),
        cap: i64,
    ) -> Result<Vec<ConeHit>, sqlx::Error> {
        if ranges.is_empty() {
            return Ok(Vec::new());
        }
        // One index range scan per range, glued with UNION ALL: SQLite's
        // plan for `hpx BETWEEN … OR hpx BETWEEN …` with the time window
        // read a million-row archive in ~150 ms, this in well under 1 ms.
        let n = 2 * ranges.len() + 2;
        let parts: Vec<String> = (0..ranges.len())
            .map(|i| {
                format!(
                    "SELECT candid, ra, dec, jd FROM alerts WHERE broker_id = $1 \
                     AND hpx BETWEEN ${} AND ${} AND jd >= ${n} AND jd <= ${}",
                    2 * i + 2,
                    2 * i + 3,
                    n + 1
                )
            })
            .collect();
        let sql = format!("{} LIMIT ${}", parts.join(" UNION ALL "), n + 2);
        with_pool!(self.db, pool => {
            let mut q = sqlx::query_as::<_, ConeHit>(&sql).bind(broker_id);
            for r in ranges {
                q = q.bind(*r.start()).bind(*r.end());
            }
            q.bind(jd.0).bind(jd.1).bind(cap).fetch_all(pool).await
        })
    }

    /// Alerts by candid, in the order asked.
    pub async fn alerts_by_candid(
        &self,
        broker_id: &str,
        candids: &[i64],
    ) -> Result<Vec<AlertRow>, sqlx::Error> {
        if candids.is_empty() {
            return Ok(Vec::new());
        }
        let placeholders: Vec<String> = (0..candids.len()).map(|i| format!("${}", i + 2)).collect();
        let sql = format!(
            "SELECT {ALERT_COLUMNS} FROM alerts WHERE broker_id = $1 AND candid IN ({})",
            placeholders.join(", ")
        );
        let mut rows = with_pool!(self.db, pool => {
            let mut q = sqlx::query_as::<_, AlertRow>(&sql).bind(broker_id);
            for c in candids {
                q = q.bind(*c);
            }
            q.fetch_all(pool).await
        })?;
        rows.sort_by_key(|r| candids.iter().position(|c| *c == r.candid));
        Ok(rows)
    }

    /// The packets of alerts by candid.
    pub async fn packets(
        &self,
        broker_id: &str,
        candids: &[i64],
    ) -> Result<Vec<PacketRow>, sqlx::Error> {
        if candids.is_empty() {
            return Ok(Vec::new());
        }
        let placeholders: Vec<String> = (0..candids.len()).map(|i| format!("${}", i + 2)).collect();
        let sql = format!(
            "SELECT candid, jd, schema_id, packet FROM alerts WHERE broker_id = $1 AND candid IN ({})",
            placeholders.join(", ")
        );
        with_pool!(self.db, pool => {
            let mut q = sqlx::query_as::<_, PacketRow>(&sql).bind(broker_id);
            for c in candids {
                q = q.bind(*c);
            }
            q.fetch_all(pool).await
        })
    }

    /// Every packet of an object, oldest first.
    pub async fn packets_of_object(
        &self,
        broker_id: &str,
        object_id: &str,
    ) -> Result<Vec<PacketRow>, sqlx::Error> {
        let sql = "SELECT candid, jd, schema_id, packet FROM alerts WHERE broker_id = $1 AND object_id = $2 ORDER BY jd, candid";
        with_pool!(self.db, pool => sqlx::query_as::<_, PacketRow>(sql)
            .bind(broker_id)
            .bind(object_id)
            .fetch_all(pool)
            .await)
    }

    /// The latest alert of an object.
    pub async fn latest_of_object(
        &self,
        broker_id: &str,
        object_id: &str,
    ) -> Result<Option<AlertRow>, sqlx::Error> {
        let sql = format!(
            "SELECT {ALERT_COLUMNS} FROM alerts WHERE broker_id = $1 AND object_id = $2 ORDER BY jd DESC, candid DESC LIMIT 1"
        );
        with_pool!(self.db, pool => sqlx::query_as::<_, AlertRow>(&sql)
            .bind(broker_id)
            .bind(object_id)
            .fetch_optional(pool)
            .await)
    }

    pub async fn schemas(&self) -> Result<Vec<SchemaRow>, sqlx::Error> {
        let sql = "SELECT schema_id, version, schema_json, paths, first_seen_ms FROM alert_schemas \
                   ORDER BY first_seen_ms, schema_id";
        with_pool!(self.db, pool => sqlx::query_as::<_, SchemaRow>(sql).fetch_all(pool).await)
    }

    pub async fn schema(&self, schema_id: &str) -> Result<Option<SchemaRow>, sqlx::Error> {
        let sql = "SELECT schema_id, version, schema_json, paths, first_seen_ms FROM alert_schemas WHERE schema_id = $1";
        with_pool!(self.db, pool => sqlx::query_as::<_, SchemaRow>(sql).bind(schema_id).fetch_optional(pool).await)
    }
}

/// The `alert_files` row of an ingest.
#[derive(Clone, Copy, Debug)]
pub struct FileRecord<'a> {
    pub broker_id: &'a str,
    pub checksum: &'a str,
    pub source: &'a str,
    pub alerts: i64,
    pub ingested_at_ms: i64,
}
