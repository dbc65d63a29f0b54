//! The approvals service's SQL, one text for SQLite and PostgreSQL.

use crate::model::ApprovalStatus;
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

/// A tenant's policy.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct PolicyRow {
    #[sqlx(try_from = "String")]
    pub tenant_id: TenantId,
    pub trading_enabled: bool,
    pub live_enabled: bool,
    pub max_notional_usd: f64,
    pub max_quantity: f64,
    pub updated_at_ms: i64,
}

impl PolicyRow {
    /// The defaults: data and backtests only.
    pub fn default_for(tenant_id: &TenantId) -> Self {
        PolicyRow {
            tenant_id: tenant_id.clone(),
            trading_enabled: false,
            live_enabled: false,
            max_notional_usd: 10_000.0,
            max_quantity: 100.0,
            updated_at_ms: 0,
        }
    }
}

/// An approval request.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct ApprovalRow {
    pub approval_id: String,
    #[sqlx(try_from = "String")]
    pub tenant_id: TenantId,
    pub tool: String,
    pub arguments: String,
    #[sqlx(try_from = "String")]
    pub status: ApprovalStatus,
    pub requested_by: String,
    pub requester: String,
    pub session_id: String,
    pub decided_by: String,
    pub note: String,
    pub result: Option<String>,
    pub created_at_ms: i64,
    pub decided_at_ms: Option<i64>,
    pub expires_at_ms: i64,
    /// The owning gRPC service and method of the call.
    pub service: String,
    pub method: String,
    /// The encoded request message, base64.
    pub request: String,
    /// What the call would do, as the owner's check described it (JSON;
    /// empty when it said nothing).
    pub summary: String,
}

const APPROVAL_COLUMNS: &str = "approval_id, tenant_id, tool, arguments, status, requested_by, requester, session_id, \
     decided_by, note, result, created_at_ms, decided_at_ms, expires_at_ms, service, method, request, summary";

/// What a transition also records.
#[derive(Clone, Copy, Debug, Default)]
pub struct Change<'a> {
    pub decided_by: Option<&'a str>,
    pub note: Option<&'a str>,
    pub result: Option<&'a str>,
}

/// The approvals tables.
#[derive(Clone, Debug)]
pub struct Store {
    db: Db,
}

impl Store {
    pub fn new(db: Db) -> Self {
        Store { db }
    }

    pub async fn policy(&self, tenant_id: &TenantId) -> Result<PolicyRow, sqlx::Error> {
        let sql = "SELECT tenant_id, trading_enabled, live_enabled, max_notional_usd, max_quantity, updated_at_ms \
                   FROM policies WHERE tenant_id = $1";
        let row = with_pool!(self.db, pool => sqlx::query_as::<_, PolicyRow>(sql).bind(tenant_id.as_str()).fetch_optional(pool).await)?;
        Ok(row.unwrap_or_else(|| PolicyRow::default_for(tenant_id)))
    }

    pub async fn put_policy(&self, p: &PolicyRow) -> Result<(), sqlx::Error> {
        let _gate = self.db.write_gate().await;
        let sql = "INSERT INTO policies (tenant_id, trading_enabled, live_enabled, max_notional_usd, max_quantity, updated_at_ms) \
                   VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (tenant_id) DO UPDATE SET \
                   trading_enabled = excluded.trading_enabled, live_enabled = excluded.live_enabled, \
                   max_notional_usd = excluded.max_notional_usd, max_quantity = excluded.max_quantity, \
                   updated_at_ms = excluded.updated_at_ms";
        with_pool!(self.db, pool => sqlx::query(sql)
            .bind(p.tenant_id.as_str())
            .bind(p.trading_enabled)
            .bind(p.live_enabled)
            .bind(p.max_notional_usd)
            .bind(p.max_quantity)
            .bind(p.updated_at_ms)
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))?;
        Ok(())
    }

    pub async fn insert(&self, a: &ApprovalRow) -> Result<(), sqlx::Error> {
        let _gate = self.db.write_gate().await;
        let sql = format!(
            "INSERT INTO approvals ({APPROVAL_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)"
        );
        with_pool!(self.db, pool => sqlx::query(&sql)
            .bind(&a.approval_id)
            .bind(a.tenant_id.as_str())
            .bind(&a.tool)
            .bind(&a.arguments)
            .bind(a.status.as_str())
            .bind(&a.requested_by)
            .bind(&a.requester)
            .bind(&a.session_id)
            .bind(&a.decided_by)
            .bind(&a.note)
            .bind(&a.result)
            .bind(a.created_at_ms)
            .bind(a.decided_at_ms)
            .bind(a.expires_at_ms)
            .bind(&a.service)
            .bind(&a.method)
            .bind(&a.request)
            .bind(&a.summary)
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))?;
        Ok(())
    }

    pub async fn get(
        &self,
        tenant_id: &TenantId,
        approval_id: &str,
    ) -> Result<Option<ApprovalRow>, sqlx::Error> {
        let sql = format!(
            "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE approval_id = $1 AND tenant_id = $2"
        );
        with_pool!(self.db, pool => sqlx::query_as::<_, ApprovalRow>(&sql).bind(approval_id).bind(tenant_id.as_str()).fetch_optional(pool).await)
    }

    pub async fn list(
        &self,
        tenant_id: &TenantId,
        status: Option<ApprovalStatus>,
    ) -> Result<Vec<ApprovalRow>, sqlx::Error> {
        let sql = format!(
            "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE tenant_id = $1 AND ($2 = '' OR status = $2) \
             ORDER BY created_at_ms DESC, approval_id LIMIT 200"
        );
        with_pool!(self.db, pool => sqlx::query_as::<_, ApprovalRow>(&sql).bind(tenant_id.as_str()).bind(status.map_or("", ApprovalStatus::as_str)).fetch_all(pool).await)
    }

    /// A pending, unexpired approval of exactly this call: the same tenant,
    /// requester and session, tool, owning method and encoded request.
    pub async fn pending_like(
        &self,
        a: &ApprovalRow,
        now_ms: i64,
    ) -> Result<Option<ApprovalRow>, sqlx::Error> {
        let sql = format!(
            "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE tenant_id = $1 AND status = 'pending' \
             AND requested_by = $2 AND session_id = $3 AND tool = $4 AND service = $5 AND method = $6 \
             AND request = $7 AND expires_at_ms > $8 ORDER BY created_at_ms, approval_id LIMIT 1"
        );
        with_pool!(self.db, pool => sqlx::query_as::<_, ApprovalRow>(&sql)
            .bind(a.tenant_id.as_str())
            .bind(&a.requested_by)
            .bind(&a.session_id)
            .bind(&a.tool)
            .bind(&a.service)
            .bind(&a.method)
            .bind(&a.request)
            .bind(now_ms)
            .fetch_optional(pool)
            .await)
    }

    /// Move an approval from `from` to `to`; false when it was not in `from`
    /// (someone else decided first).
    pub async fn transition(
        &self,
        approval_id: &str,
        from: ApprovalStatus,
        to: ApprovalStatus,
        change: &Change<'_>,
        now_ms: i64,
    ) -> Result<bool, sqlx::Error> {
        let Change {
            decided_by,
            note,
            result,
        } = *change;
        let _gate = self.db.write_gate().await;
        let sql = "UPDATE approvals SET status = $3, decided_by = COALESCE($4, decided_by), note = COALESCE($5, note), \
                   result = COALESCE($6, result), decided_at_ms = COALESCE(decided_at_ms, $7) \
                   WHERE approval_id = $1 AND status = $2";
        let n = with_pool!(self.db, pool => sqlx::query(sql)
            .bind(approval_id)
            .bind(from.as_str())
            .bind(to.as_str())
            .bind(decided_by)
            .bind(note)
            .bind(result)
            .bind(now_ms)
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))?;
        Ok(n > 0)
    }
}
