//! The catalog tables' SQL, one text for SQLite and PostgreSQL.

use super::parse::SourceRow;
use ithaca_kit::db::Db;
use ithaca_kit::with_pool;
use std::ops::RangeInclusive;

/// Sources per INSERT statement (19 parameters each).
const INSERT_BATCH: usize = 200;

const SOURCE_COLUMNS: &str = "catalog, source_id, ra, dec, hpx, epoch, pm_ra, pm_dec, parallax, mag, mag_band, \
     kind, morphology, major_axis, minor_axis, redshift, radial_velocity, names, b_v";

#[derive(Clone, Debug)]
pub struct CatalogStore {
    db: Db,
}

impl CatalogStore {
    pub fn new(db: Db) -> Self {
        CatalogStore { db }
    }

    /// The catalog and row count of a file ingested before.
    pub async fn file(&self, checksum: &str) -> Result<Option<(String, i64)>, sqlx::Error> {
        let sql = "SELECT catalog, rows FROM catalog_files WHERE checksum = $1";
        with_pool!(self.db, pool => sqlx::query_as::<_, (String, i64)>(sql).bind(checksum).fetch_optional(pool).await)
    }

    /// Store a file's sources in one transaction; a source already present
    /// (same catalog and id) is replaced by the newer file's. Sources written
    /// of total go to `progress` after each insert batch (written, not yet
    /// committed: the commit follows the last batch).
    pub async fn ingest(
        &self,
        checksum: &str,
        source: &str,
        catalog: &str,
        rows: &[SourceRow],
        now_ms: i64,
        progress: Option<&crate::progress::Progress>,
    ) -> Result<(), sqlx::Error> {
        let total = rows.len() as u64;
        let mut written = 0u64;
        let _gate = self.db.write_gate().await;
        with_pool!(self.db, pool => {
            let mut tx = pool.begin().await?;
            for chunk in rows.chunks(INSERT_BATCH) {
                let mut b = sqlx::QueryBuilder::new(format!("INSERT INTO catalog_sources ({SOURCE_COLUMNS}) "));
                b.push_values(chunk, |mut v, r| {
                    v.push_bind(&r.catalog)
                        .push_bind(&r.source_id)
                        .push_bind(r.ra)
                        .push_bind(r.dec)
                        .push_bind(r.hpx)
                        .push_bind(r.epoch)
                        .push_bind(r.pm_ra)
                        .push_bind(r.pm_dec)
                        .push_bind(r.parallax)
                        .push_bind(r.mag)
                        .push_bind(&r.mag_band)
                        .push_bind(&r.kind)
                        .push_bind(&r.morphology)
                        .push_bind(r.major_axis)
                        .push_bind(r.minor_axis)
                        .push_bind(r.redshift)
                        .push_bind(r.radial_velocity)
                        .push_bind(&r.names)
                        .push_bind(r.b_v);
                });
                b.push(
                    " ON CONFLICT (catalog, source_id) DO UPDATE SET ra = excluded.ra, dec = excluded.dec, \
                     hpx = excluded.hpx, epoch = excluded.epoch, pm_ra = excluded.pm_ra, pm_dec = excluded.pm_dec, \
                     parallax = excluded.parallax, mag = excluded.mag, mag_band = excluded.mag_band, \
                     kind = excluded.kind, morphology = excluded.morphology, major_axis = excluded.major_axis, \
                     minor_axis = excluded.minor_axis, redshift = excluded.redshift, \
                     radial_velocity = excluded.radial_velocity, names = excluded.names, b_v = excluded.b_v",
                );
                b.build().execute(&mut *tx).await?;
                written += chunk.len() as u64;
                crate::progress::report(progress, written, total);
            }
            sqlx::query("INSERT INTO catalog_files (checksum, catalog, source, rows, ingested_at_ms) VALUES ($1, $2, $3, $4, $5)")
                .bind(checksum)
                .bind(catalog)
                .bind(source)
                .bind(rows.len() as i64)
                .bind(now_ms)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
        });
        Ok(())
    }

    /// Sources of `catalogs` whose index falls in `ranges`.
    pub async fn in_ranges(
        &self,
        catalogs: &[&str],
        ranges: &[RangeInclusive<i64>],
    ) -> Result<Vec<SourceRow>, sqlx::Error> {
        if ranges.is_empty() || catalogs.is_empty() {
            return Ok(Vec::new());
        }
        // One index range scan per range (see the alert store's cone query).
        let first = 2 * ranges.len() + 1;
        let cats: Vec<String> = (0..catalogs.len())
            .map(|i| format!("${}", first + i))
            .collect();
        let cats = cats.join(", ");
        let parts: Vec<String> = (0..ranges.len())
            .map(|i| {
                format!(
                    "SELECT {SOURCE_COLUMNS} FROM catalog_sources WHERE hpx BETWEEN ${} AND ${} \
                     AND catalog IN ({cats})",
                    2 * i + 1,
                    2 * i + 2
                )
            })
            .collect();
        let sql = parts.join(" UNION ALL ");
        with_pool!(self.db, pool => {
            let mut q = sqlx::query_as::<_, SourceRow>(&sql);
            for r in ranges {
                q = q.bind(*r.start()).bind(*r.end());
            }
            for c in catalogs {
                q = q.bind(*c);
            }
            q.fetch_all(pool).await
        })
    }

    /// Per catalog: its sources, the faintest magnitude (and its band) and
    /// the largest redshift among them.
    pub async fn coverage(
        &self,
    ) -> Result<Vec<(String, i64, Option<f64>, Option<String>, Option<f64>)>, sqlx::Error> {
        let sql = "SELECT catalog, COUNT(*), MAX(mag), MAX(mag_band), MAX(redshift) FROM catalog_sources \
                   GROUP BY catalog ORDER BY catalog";
        with_pool!(self.db, pool => sqlx::query_as(sql).fetch_all(pool).await)
    }

    /// The largest proper motion in a catalog, mas/yr (bounds how far a
    /// source can have moved).
    pub async fn max_proper_motion(&self, catalog: &str) -> Result<Option<f64>, sqlx::Error> {
        let sql = "SELECT MAX(ABS(pm_ra) + ABS(pm_dec)) FROM catalog_sources WHERE catalog = $1";
        with_pool!(self.db, pool => sqlx::query_scalar::<_, Option<f64>>(sql).bind(catalog).fetch_one(pool).await)
    }
}
