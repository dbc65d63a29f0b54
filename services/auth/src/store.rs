//! The auth service's SQL. Each query is written once and runs on SQLite and
//! PostgreSQL alike (see `ithaca_kit::db`).

use crate::model::{KeyActor, KeyId, SignInId};
use ithaca_kit::db::{Db, Migrations};
use ithaca_kit::id::TenantId;
use ithaca_kit::with_pool;
use sqlx::migrate::Migrator;

static SQLITE: Migrator = sqlx::migrate!("./migrations/sqlite");
static POSTGRES: Migrator = sqlx::migrate!("./migrations/postgres");

/// This service's migrations.
pub const MIGRATIONS: Migrations = Migrations {
    sqlite: &SQLITE,
    postgres: &POSTGRES,
    sqlite_page_size: None,
};

/// A tenant row.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct TenantRow {
    #[sqlx(try_from = "String")]
    pub tenant_id: TenantId,
    pub name: String,
    pub created_at_ms: i64,
}

/// A key row. `salt` and `secret_hash` stay inside this crate.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct KeyRow {
    #[sqlx(try_from = "String")]
    pub key_id: KeyId,
    #[sqlx(try_from = "String")]
    pub tenant_id: TenantId,
    pub env: String,
    pub salt: String,
    pub secret_hash: String,
    /// Space-separated scope names.
    pub scopes: String,
    #[sqlx(try_from = "String")]
    pub actor: KeyActor,
    pub label: String,
    pub created_at_ms: i64,
    pub revoked_at_ms: Option<i64>,
    pub last_used_at_ms: Option<i64>,
}

/// A console sign-in row.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct SignInRow {
    #[sqlx(try_from = "String")]
    pub sign_in_id: SignInId,
    #[sqlx(try_from = "String")]
    pub key_id: KeyId,
    #[sqlx(try_from = "String")]
    pub tenant_id: TenantId,
    pub created_at_ms: i64,
    pub expires_at_ms: i64,
    pub ended_at_ms: Option<i64>,
}

impl SignInRow {
    /// Whether the sign-in still admits its key at `now_ms`.
    pub fn is_open(&self, now_ms: i64) -> bool {
        self.ended_at_ms.is_none() && now_ms < self.expires_at_ms
    }
}

const SIGN_IN_COLUMNS: &str =
    "sign_in_id, key_id, tenant_id, created_at_ms, expires_at_ms, ended_at_ms";

const KEY_COLUMNS: &str = "key_id, tenant_id, env, salt, secret_hash, scopes, actor, label, \
     created_at_ms, revoked_at_ms, last_used_at_ms";

/// What one lease took from a quota window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Leased {
    /// Units granted by this lease.
    pub granted: i64,
    /// Units of the window spent so far, these included.
    pub used: i64,
}

/// The auth tables.
#[derive(Clone, Debug)]
pub struct Store {
    db: Db,
}

impl Store {
    pub fn new(db: Db) -> Self {
        Store { db }
    }

    /// The database, for the authorization server's queries
    /// (`oauth_store.rs`).
    pub(crate) fn db(&self) -> &Db {
        &self.db
    }

    pub async fn insert_tenant(&self, row: &TenantRow) -> Result<(), sqlx::Error> {
        let _gate = self.db.write_gate().await;
        let sql = "INSERT INTO tenants (tenant_id, name, created_at_ms) VALUES ($1, $2, $3)";
        with_pool!(self.db, pool => sqlx::query(sql)
            .bind(row.tenant_id.as_str())
            .bind(&row.name)
            .bind(row.created_at_ms)
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))?;
        Ok(())
    }

    pub async fn list_tenants(&self) -> Result<Vec<TenantRow>, sqlx::Error> {
        let sql =
            "SELECT tenant_id, name, created_at_ms FROM tenants ORDER BY created_at_ms, tenant_id";
        with_pool!(self.db, pool => sqlx::query_as::<_, TenantRow>(sql).fetch_all(pool).await)
    }

    pub async fn tenant_exists(&self, tenant_id: &TenantId) -> Result<bool, sqlx::Error> {
        let sql = "SELECT COUNT(*) FROM tenants WHERE tenant_id = $1";
        let n: i64 = with_pool!(self.db, pool => sqlx::query_scalar(sql).bind(tenant_id.as_str()).fetch_one(pool).await)?;
        Ok(n > 0)
    }

    pub async fn insert_key(&self, row: &KeyRow) -> Result<(), sqlx::Error> {
        let _gate = self.db.write_gate().await;
        let sql = format!(
            "INSERT INTO api_keys ({KEY_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
        );
        with_pool!(self.db, pool => sqlx::query(&sql)
            .bind(row.key_id.as_str())
            .bind(row.tenant_id.as_str())
            .bind(&row.env)
            .bind(&row.salt)
            .bind(&row.secret_hash)
            .bind(&row.scopes)
            .bind(row.actor.as_str())
            .bind(&row.label)
            .bind(row.created_at_ms)
            .bind(row.revoked_at_ms)
            .bind(row.last_used_at_ms)
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))?;
        Ok(())
    }

    /// A tenant's keys, oldest first.
    pub async fn list_keys(
        &self,
        tenant_id: &TenantId,
        include_revoked: bool,
    ) -> Result<Vec<KeyRow>, sqlx::Error> {
        let sql = format!(
            "SELECT {KEY_COLUMNS} FROM api_keys WHERE tenant_id = $1 \
             AND ($2 OR revoked_at_ms IS NULL) ORDER BY created_at_ms, key_id"
        );
        with_pool!(self.db, pool => sqlx::query_as::<_, KeyRow>(&sql)
            .bind(tenant_id.as_str())
            .bind(include_revoked)
            .fetch_all(pool)
            .await)
    }

    /// Look a key up by id alone, for verification.
    pub async fn find_key(&self, key_id: &KeyId) -> Result<Option<KeyRow>, sqlx::Error> {
        let sql = format!("SELECT {KEY_COLUMNS} FROM api_keys WHERE key_id = $1");
        with_pool!(self.db, pool => sqlx::query_as::<_, KeyRow>(&sql)
            .bind(key_id.as_str())
            .fetch_optional(pool)
            .await)
    }

    /// Revoke a tenant's key; `None` when the tenant has no such key. Revoking
    /// twice keeps the first revocation time.
    pub async fn revoke_key(
        &self,
        tenant_id: &TenantId,
        key_id: &KeyId,
        now_ms: i64,
    ) -> Result<Option<KeyRow>, sqlx::Error> {
        {
            let _gate = self.db.write_gate().await;
            let sql = "UPDATE api_keys SET revoked_at_ms = COALESCE(revoked_at_ms, $3) \
                       WHERE tenant_id = $1 AND key_id = $2";
            with_pool!(self.db, pool => sqlx::query(sql)
                .bind(tenant_id.as_str())
                .bind(key_id.as_str())
                .bind(now_ms)
                .execute(pool)
                .await
                .map(|r| r.rows_affected()))?;
        }
        let key = self.find_key(key_id).await?;
        Ok(key.filter(|k| k.tenant_id == *tenant_id))
    }

    pub async fn insert_sign_in(&self, row: &SignInRow) -> Result<(), sqlx::Error> {
        let _gate = self.db.write_gate().await;
        let sql =
            format!("INSERT INTO sign_ins ({SIGN_IN_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6)");
        with_pool!(self.db, pool => sqlx::query(&sql)
            .bind(row.sign_in_id.as_str())
            .bind(row.key_id.as_str())
            .bind(row.tenant_id.as_str())
            .bind(row.created_at_ms)
            .bind(row.expires_at_ms)
            .bind(row.ended_at_ms)
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))?;
        Ok(())
    }

    pub async fn find_sign_in(&self, id: &SignInId) -> Result<Option<SignInRow>, sqlx::Error> {
        let sql = format!("SELECT {SIGN_IN_COLUMNS} FROM sign_ins WHERE sign_in_id = $1");
        with_pool!(self.db, pool => sqlx::query_as::<_, SignInRow>(&sql)
            .bind(id.as_str())
            .fetch_optional(pool)
            .await)
    }

    /// End a sign-in of `key_id`; `None` when that key has no such
    /// sign-in. Ending twice keeps the first end time.
    pub async fn end_sign_in(
        &self,
        key_id: &KeyId,
        id: &SignInId,
        now_ms: i64,
    ) -> Result<Option<SignInRow>, sqlx::Error> {
        {
            let _gate = self.db.write_gate().await;
            let sql = "UPDATE sign_ins SET ended_at_ms = COALESCE(ended_at_ms, $3) \
                       WHERE key_id = $1 AND sign_in_id = $2";
            with_pool!(self.db, pool => sqlx::query(sql)
                .bind(key_id.as_str())
                .bind(id.as_str())
                .bind(now_ms)
                .execute(pool)
                .await
                .map(|r| r.rows_affected()))?;
        }
        let row = self.find_sign_in(id).await?;
        Ok(row.filter(|r| r.key_id == *key_id))
    }

    /// End every open sign-in of `key_id` (its key was revoked).
    pub async fn end_sign_ins_of(&self, key_id: &KeyId, now_ms: i64) -> Result<u64, sqlx::Error> {
        let _gate = self.db.write_gate().await;
        let sql = "UPDATE sign_ins SET ended_at_ms = $2 WHERE key_id = $1 AND ended_at_ms IS NULL";
        with_pool!(self.db, pool => sqlx::query(sql)
            .bind(key_id.as_str())
            .bind(now_ms)
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))
    }

    /// Delete the sign-ins that expired before `now_ms`.
    pub async fn sweep_sign_ins(&self, now_ms: i64) -> Result<u64, sqlx::Error> {
        let _gate = self.db.write_gate().await;
        let sql = "DELETE FROM sign_ins WHERE expires_at_ms < $1";
        with_pool!(self.db, pool => sqlx::query(sql)
            .bind(now_ms)
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))
    }

    /// Record a successful verification. Written at most once per
    /// `min_interval_ms` per key, so a busy key does not turn every request
    /// into a write.
    pub async fn touch_last_used(
        &self,
        key_id: &KeyId,
        now_ms: i64,
        min_interval_ms: i64,
    ) -> Result<(), sqlx::Error> {
        let _gate = self.db.write_gate().await;
        let sql = "UPDATE api_keys SET last_used_at_ms = $2 WHERE key_id = $1 \
                   AND (last_used_at_ms IS NULL OR last_used_at_ms <= $3)";
        with_pool!(self.db, pool => sqlx::query(sql)
            .bind(key_id.as_str())
            .bind(now_ms)
            .bind(now_ms - min_interval_ms)
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))?;
        Ok(())
    }

    /// Take up to `want` units (at most `limit` per window) from the window
    /// of `subject` that starts at `window_start_ms`, in one statement: the
    /// row lock of the upsert (PostgreSQL) or the single writer (SQLite)
    /// makes concurrent leases from several edges add up exactly. Every
    /// right-hand side of `SET` reads the row as it was, so `granted` and
    /// `used` are computed from the same old `used`.
    pub async fn lease_quota(
        &self,
        subject: &str,
        window_ms: i64,
        window_start_ms: i64,
        limit: i64,
        want: i64,
    ) -> Result<Leased, sqlx::Error> {
        let _gate = self.db.write_gate().await;
        let sql = "INSERT INTO quota_usage (subject, window_ms, window_start_ms, used, granted) \
                   VALUES ($1, $2, $3, $4, $4) \
                   ON CONFLICT (subject, window_ms, window_start_ms) DO UPDATE SET \
                   granted = CASE WHEN quota_usage.used + $5 <= $6 THEN $5 \
                       WHEN quota_usage.used < $6 THEN $6 - quota_usage.used ELSE 0 END, \
                   used = CASE WHEN quota_usage.used + $5 <= $6 THEN quota_usage.used + $5 \
                       WHEN quota_usage.used < $6 THEN $6 ELSE quota_usage.used END \
                   RETURNING granted, used";
        let (granted, used): (i64, i64) = with_pool!(self.db, pool => sqlx::query_as(sql)
            .bind(subject)
            .bind(window_ms)
            .bind(window_start_ms)
            .bind(want.min(limit))
            .bind(want)
            .bind(limit)
            .fetch_one(pool)
            .await)?;
        Ok(Leased { granted, used })
    }

    /// Delete the quota windows that ended before `now_ms`.
    pub async fn sweep_quota(&self, now_ms: i64) -> Result<u64, sqlx::Error> {
        let _gate = self.db.write_gate().await;
        let sql = "DELETE FROM quota_usage WHERE window_start_ms + window_ms < $1";
        with_pool!(self.db, pool => sqlx::query(sql)
            .bind(now_ms)
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))
    }
}
