//! The filter tables' SQL for taking a filter off the live stream and for
//! deleting it, one text for SQLite and PostgreSQL. Both name the tenant,
//! like every read of [`FilterStore`].

use super::store::FilterStore;
use ithaca_kit::with_pool;

/// What a deletion found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Deletion {
    /// The tenant has no such filter.
    NotFound,
    /// The filter has an active version: nothing was deleted.
    Active(i64),
    /// The filter, its versions and its matches are gone.
    Deleted { versions: u64, matches: u64 },
}

impl FilterStore {
    /// Clear the filter's active version. `None`: no such filter of the
    /// tenant; `Some(previous)`: the version that was active, if any.
    pub async fn deactivate(
        &self,
        tenant_id: &str,
        filter_id: &str,
    ) -> Result<Option<Option<i64>>, sqlx::Error> {
        let _gate = self.db.write_gate().await;
        // The UPDATE locks the row (PostgreSQL) or the database (SQLite)
        // before the read, so a concurrent activation is either before it
        // (and reported as `previous`) or after it.
        let lock = "UPDATE filters SET last_version = last_version \
                    WHERE tenant_id = $1 AND filter_id = $2";
        let read = "SELECT active_version FROM filters WHERE tenant_id = $1 AND filter_id = $2";
        let clear = "UPDATE filters SET active_version = NULL, activated_at_ms = NULL \
                     WHERE tenant_id = $1 AND filter_id = $2";
        with_pool!(self.db, pool => {
            let mut tx = pool.begin().await?;
            let found = sqlx::query(lock)
                .bind(tenant_id)
                .bind(filter_id)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            if found == 0 {
                return Ok(None);
            }
            let previous = sqlx::query_scalar::<_, Option<i64>>(read)
                .bind(tenant_id)
                .bind(filter_id)
                .fetch_one(&mut *tx)
                .await?;
            if previous.is_some() {
                sqlx::query(clear)
                    .bind(tenant_id)
                    .bind(filter_id)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            Ok(Some(previous))
        })
    }

    /// Delete an inactive filter with its versions and saved matches, in
    /// one transaction; an active one is left as it is.
    pub async fn delete_filter(
        &self,
        tenant_id: &str,
        filter_id: &str,
    ) -> Result<Deletion, sqlx::Error> {
        let _gate = self.db.write_gate().await;
        // Lock the row first (see `deactivate`): an activation racing the
        // deletion either makes it refuse or finds no filter.
        let lock = "UPDATE filters SET last_version = last_version \
                    WHERE tenant_id = $1 AND filter_id = $2";
        let read = "SELECT active_version FROM filters WHERE tenant_id = $1 AND filter_id = $2";
        let matches = "DELETE FROM filter_matches WHERE filter_id = $1";
        let versions = "DELETE FROM filter_versions WHERE filter_id = $1";
        let filter = "DELETE FROM filters WHERE tenant_id = $1 AND filter_id = $2";
        with_pool!(self.db, pool => {
            let mut tx = pool.begin().await?;
            let found = sqlx::query(lock)
                .bind(tenant_id)
                .bind(filter_id)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            if found == 0 {
                return Ok(Deletion::NotFound);
            }
            let active = sqlx::query_scalar::<_, Option<i64>>(read)
                .bind(tenant_id)
                .bind(filter_id)
                .fetch_one(&mut *tx)
                .await?;
            if let Some(version) = active {
                return Ok(Deletion::Active(version));
            }
            let matches = sqlx::query(matches)
                .bind(filter_id)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            let versions = sqlx::query(versions)
                .bind(filter_id)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            sqlx::query(filter)
                .bind(tenant_id)
                .bind(filter_id)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(Deletion::Deleted { versions, matches })
        })
    }
}
