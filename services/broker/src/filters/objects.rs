//! One object's saved matches across the caller's tenant's filters, for the
//! console's object page: the SQL (one text for SQLite and PostgreSQL,
//! naming the tenant like every read of [`FilterStore`]) and the checks on
//! the request.
//!
//! The query starts from the tenant's filters (`filters_by_tenant`) and
//! reads each one's matches by its primary key's prefix, so it needs no
//! index on `object_id`: auto-save keeps a bounded number per filter.

use super::service::{FilterService, tenant_of};
use super::store::{FilterStore, MatchRow};
use crate::alerts::service::{ARCHIVE_BROKER, parse_object_id};
use ithaca_kit::error::ServiceError;
use ithaca_kit::principal::Principal;
use ithaca_kit::with_pool;

/// Default and largest number of matches listed.
pub const DEFAULT_OBJECT_MATCHES: i64 = 50;
pub const MAX_OBJECT_MATCHES: i64 = 200;

/// A saved match with the filter that saved it.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct ObjectMatchRow {
    pub filter_name: String,
    pub active_version: Option<i64>,
    #[sqlx(flatten)]
    pub matched: MatchRow,
}

/// What the object page lists.
#[derive(Clone, Debug)]
pub struct ObjectMatches {
    pub broker_id: String,
    pub object_id: String,
    pub matches: Vec<ObjectMatchRow>,
    pub truncated: bool,
}

impl FilterStore {
    /// The newest `limit` matches of `object_id` saved by `tenant_id`'s
    /// filters.
    pub async fn matches_of_object(
        &self,
        tenant_id: &str,
        broker_id: &str,
        object_id: &str,
        limit: i64,
    ) -> Result<Vec<ObjectMatchRow>, sqlx::Error> {
        let sql = "SELECT f.name AS filter_name, f.active_version, \
                   m.filter_id, m.candid, m.version, m.broker_id, m.object_id, m.jd, \
                   m.matched_at_ms, m.fields \
                   FROM filters f JOIN filter_matches m ON m.filter_id = f.filter_id \
                   WHERE f.tenant_id = $1 AND m.broker_id = $2 AND m.object_id = $3 \
                   ORDER BY m.matched_at_ms DESC, m.candid DESC, m.filter_id LIMIT $4";
        with_pool!(self.db, pool => sqlx::query_as::<_, ObjectMatchRow>(sql)
            .bind(tenant_id)
            .bind(broker_id)
            .bind(object_id)
            .bind(limit)
            .fetch_all(pool)
            .await)
    }
}

impl FilterService {
    /// `ListObjectFilterMatches`: an unknown object, or one no filter of
    /// the tenant matched, has none.
    pub async fn object_matches(
        &self,
        caller: &Principal,
        broker_id: &str,
        object_id: &str,
        limit: Option<i32>,
    ) -> Result<ObjectMatches, ServiceError> {
        let tenant = tenant_of(caller)?;
        let object_id = parse_object_id(object_id)?;
        let broker_id = match broker_id.trim() {
            "" => ARCHIVE_BROKER.to_owned(),
            b if b.len() <= 32
                && b.bytes().all(|c| {
                    c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_' || c == b'-'
                }) =>
            {
                b.to_owned()
            }
            b => {
                let shown: String = b.chars().take(40).collect();
                return Err(ServiceError::invalid(format!(
                    "broker_id: {shown:?} is not a broker id (1-32 of a-z, 0-9, _ and -)"
                )));
            }
        };
        let limit = match limit {
            None => DEFAULT_OBJECT_MATCHES,
            Some(n) if (1..=MAX_OBJECT_MATCHES).contains(&i64::from(n)) => i64::from(n),
            Some(n) => {
                return Err(ServiceError::invalid(format!(
                    "limit: 1 to {MAX_OBJECT_MATCHES} (got {n})"
                )));
            }
        };
        let mut matches = self
            .store
            .matches_of_object(tenant, &broker_id, &object_id, limit + 1)
            .await?;
        let truncated = matches.len() as i64 > limit;
        matches.truncate(limit as usize);
        Ok(ObjectMatches {
            broker_id,
            object_id,
            matches,
            truncated,
        })
    }
}
